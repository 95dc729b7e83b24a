/*
 * tools/ah-pgsync.c - keeps a PostgreSQL database's published tables as
 * arrangements in a heap through logical replication (work in progress).
 */
#include <stdio.h>

int main(void)
{
	fputs("ah-pgsync: not built yet\n", stderr);
	return 2;
}

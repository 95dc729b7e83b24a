/* tools/pg/views.c - being written */

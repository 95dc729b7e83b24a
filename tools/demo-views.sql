-- The views `make demo` keeps over pgbench's tables (ah-pgsync --views).
CREATE VIEW acct_by_branch AS
  SELECT bid, count(*), sum(abalance), min(abalance), max(abalance)
  FROM pgbench_accounts GROUP BY bid;
CREATE VIEW teller_branch AS
  SELECT t.tid, t.bid, t.tbalance, b.bbalance
  FROM pgbench_tellers t JOIN pgbench_branches b ON t.bid = b.bid;
CREATE VIEW branch_delta AS
  SELECT b.bid, sum(h.delta) FROM pgbench_history h
  JOIN pgbench_tellers t ON h.tid = t.tid JOIN pgbench_branches b ON t.bid = b.bid
  GROUP BY b.bid;

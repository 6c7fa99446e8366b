PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE renewals (id TEXT PRIMARY KEY, customer TEXT, amount INTEGER, status TEXT, idem_key TEXT, charge_id TEXT, updated_at REAL);
INSERT INTO renewals VALUES('ren-2026-10','cus_QxT4m2',2900,'charged','renewal-ren-2026-10-5f0c2e9a1b7d','ch_3QA1xKLkdIwHu7ix0rTq9ZpW',1793369102.0);
INSERT INTO renewals VALUES('ren-2026-11','cus_QxT4m2',2900,'charging','renewal-ren-2026-11-a41be07c93f2',NULL,1796047500.0);
COMMIT;

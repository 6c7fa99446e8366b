PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE renewals (id TEXT PRIMARY KEY, customer TEXT, amount INTEGER, status TEXT, idem_key TEXT, charge_id TEXT, updated_at REAL);
INSERT INTO renewals VALUES('ren-2024-05','cus_N8vB2qLw',2900,'charged','renewal-ren-2024-05-0c41d9e27b3a','ch_3PG4aZKx1Rm8Qw2s0hY7uT5e',1715679003.0);
INSERT INTO renewals VALUES('ren-2024-06','cus_N8vB2qLw',2900,'charging','renewal-ren-2024-06-7e2f9b18c0d4',NULL,1718357401.0);
COMMIT;

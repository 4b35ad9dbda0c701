-- placeholder for a number reserved to another branch (not committed)
SELECT 1;

-- Lets the tickler user create the per-test databases, as scripts/services
-- does for the local MariaDB.
GRANT ALL PRIVILEGES ON *.* TO 'tickler'@'%';
FLUSH PRIVILEGES;

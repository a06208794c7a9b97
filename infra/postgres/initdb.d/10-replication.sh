#!/bin/sh
# Run once by the postgres image's entrypoint when the primary's data directory is created
# (files in /docker-entrypoint-initdb.d/). Creates the replication role and the physical
# replication slot the replica streams from, so the primary keeps WAL the replica still needs.
set -eu
: "${REPLICATION_PASSWORD:?set REPLICATION_PASSWORD}"

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v pw="$REPLICATION_PASSWORD" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw';
SELECT pg_create_physical_replication_slot('replica_1');
SQL

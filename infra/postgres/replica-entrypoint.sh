#!/bin/sh
# Entry point of the streaming replica in compose.yaml (runs as the image's postgres user).
# First start: clone the primary with pg_basebackup; -R writes standby.signal and
# primary_conninfo (with the password) and -S makes it use slot replica_1. Later starts: just
# run postgres, which resumes streaming from where it stopped.
set -eu
: "${PRIMARY_HOST:?set PRIMARY_HOST}"
: "${REPLICATION_PASSWORD:?set REPLICATION_PASSWORD}"
PGDATA="${PGDATA:-/var/lib/postgresql/data}"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready -q -h "$PRIMARY_HOST" -p 5432 -U replicator -d postgres; do
        echo "waiting for the primary at $PRIMARY_HOST:5432"
        sleep 1
    done
    PGPASSWORD="$REPLICATION_PASSWORD" pg_basebackup \
        --host="$PRIMARY_HOST" --port=5432 --username=replicator \
        --pgdata="$PGDATA" --wal-method=stream --write-recovery-conf \
        --slot=replica_1 --checkpoint=fast --no-password
    chmod 0700 "$PGDATA"
fi

exec postgres -D "$PGDATA" "$@"

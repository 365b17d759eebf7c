#!/bin/sh
# Creates or upgrades the Temporal server's two PostgreSQL databases (persistence and visibility) to
# the schema of the admin-tools image running it. Safe to run on every start: `create` leaves an
# existing database alone, `setup-schema -v 0.0` keeps a newer recorded version, and
# `update-schema` applies only the versions the database does not have yet. Run by the
# temporal-schema service of docker/compose.yaml; for a server upgrade, run it with the new
# admin-tools tag first (docs/operations.md).
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
PORT="${DB_PORT:-5432}"
SCHEMA=/etc/temporal/schema/postgresql/v12

for db in temporal temporal_visibility; do
  case "$db" in
    temporal) dir="$SCHEMA/temporal/versioned" ;;
    *) dir="$SCHEMA/visibility/versioned" ;;
  esac
  echo "database $db: schema from $dir"
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$PORT" -u "$POSTGRES_USER" --db "$db" create
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$PORT" -u "$POSTGRES_USER" --db "$db" setup-schema -v 0.0
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$PORT" -u "$POSTGRES_USER" --db "$db" update-schema -d "$dir"
done
echo "Temporal's databases are at the schema of this admin-tools image"

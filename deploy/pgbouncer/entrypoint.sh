#!/bin/sh
# PgBouncer's start in the switchyard-pgbouncer image (Dockerfile, target pgbouncer): writes the
# database entry and the auth file that pgbouncer.ini includes, from the environment, then runs
# PgBouncer in the foreground (its log on stderr).
#
#   DB_HOST, DB_PORT (5432), DB_NAME (switchyard)   the PostgreSQL server behind the pooler
#   DB_USER, DB_PASSWORD                            the one role Switchyard connects as
#   PGBOUNCER_CONFIG (/etc/pgbouncer/pgbouncer.ini), PGBOUNCER_RUN_DIR (/run/pgbouncer)
set -eu
: "${DB_HOST:?DB_HOST names the PostgreSQL server}"
: "${DB_USER:?DB_USER names the database role}"
: "${DB_PASSWORD:?DB_PASSWORD is that role's password}"
run="${PGBOUNCER_RUN_DIR:-/run/pgbouncer}"
umask 077
mkdir -p "$run"
printf '[databases]\n%s = host=%s port=%s dbname=%s\n' \
  "${DB_NAME:-switchyard}" "$DB_HOST" "${DB_PORT:-5432}" "${DB_NAME:-switchyard}" > "$run/databases.ini"
printf '"%s" "%s"\n' "$DB_USER" "$(printf '%s' "$DB_PASSWORD" | sed 's/"/""/g')" > "$run/userlist.txt"
exec pgbouncer "${PGBOUNCER_CONFIG:-/etc/pgbouncer/pgbouncer.ini}"

# Sourced by smoke.sh after smoke_faults.sh (uses its helpers): the RAC
# model, one database (node 1) seen through three proxied "instances".
# Unlike independent nodes, a prepared transaction is visible and can be
# finished through any instance, also while the one that prepared it is down.

echo "== rac: three instances of one database"
"$FAULTS" start 3 --rac || abort "faults start 3 --rac"
eval "$("$FAULTS" env)" || abort "faults env"
[[ $RACAFF_PROXY_MODE == rac && $RACAFF_PROXY1_NODE$RACAFF_PROXY2_NODE$RACAFF_PROXY3_NODE == 111 ]] \
    && pass "faults env: mode rac, every instance on node 1" \
    || abort "faults env after --rac: mode=$RACAFF_PROXY_MODE nodes=$RACAFF_PROXY1_NODE,$RACAFF_PROXY2_NODE,$RACAFF_PROXY3_NODE"

rac_gid="racaff_smoke_rac_$(date +%s)_$$_${RANDOM}"
psql_at "$(proxy_dsn 1)" -c "CREATE TABLE IF NOT EXISTS racaff_smoke_rac (id text PRIMARY KEY)" \
    -c "INSERT INTO racaff_smoke_rac VALUES ('${rac_gid}_plain')" >/dev/null \
    || abort "instance 1: INSERT"
for i in 2 3; do
    n=$(psql_at "$(proxy_dsn "$i")" -c "SELECT count(*) FROM racaff_smoke_rac WHERE id = '${rac_gid}_plain'")
    [[ $n == 1 ]] && pass "rac: row written through instance 1 is visible through instance $i" \
        || fail "rac: row written through instance 1 not visible through instance $i (count=$n)"
done

# prepare_on I GID: a prepared transaction inserting GID, through instance I
prepare_on() {
    psql_at "$(proxy_dsn "$1")" -f - >/dev/null <<SQL
BEGIN;
INSERT INTO racaff_smoke_rac VALUES ('$2');
PREPARE TRANSACTION '$2';
SQL
}

prepared_through() {
    psql_at "$(proxy_dsn "$1")" -c "SELECT count(*) FROM pg_prepared_xacts WHERE gid = '$2'"
}

prepare_on 1 "$rac_gid" || abort "instance 1: PREPARE TRANSACTION '$rac_gid'"
n=$(prepared_through 3 "$rac_gid")
[[ $n == 1 ]] && pass "rac: prepared through instance 1, listed by pg_prepared_xacts through instance 3" \
    || fail "rac: instance 3 lists $rac_gid $n times"
psql_at "$(proxy_dsn 2)" -c "COMMIT PREPARED '$rac_gid'" >/dev/null \
    && pass "rac: COMMIT PREPARED through instance 2" || fail "rac: COMMIT PREPARED '$rac_gid' through instance 2"
n=$(psql_at "$(proxy_dsn 3)" -c "SELECT count(*) FROM racaff_smoke_rac WHERE id = '$rac_gid'")
[[ $n == 1 ]] && pass "rac: the committed row is visible through instance 3" \
    || fail "rac: committed row count through instance 3 = $n"

rac_gid2="${rac_gid}_recover"
prepare_on 1 "$rac_gid2" || abort "instance 1: PREPARE TRANSACTION '$rac_gid2'"
"$FAULTS" refuse 1 >/dev/null || abort "faults refuse 1"
answers 1 && fail "rac: instance 1 still answers while refused" || pass "rac: instance 1 refused"
n=$(prepared_through 2 "$rac_gid2")
[[ $n == 1 ]] && pass "rac: with instance 1 refused, recovery through instance 2 lists $rac_gid2" \
    || fail "rac: recovery through instance 2 lists $rac_gid2 $n times"
psql_at "$(proxy_dsn 2)" -c "COMMIT PREPARED '$rac_gid2'" >/dev/null \
    && pass "rac: with instance 1 refused, COMMIT PREPARED through instance 2" \
    || fail "rac: COMMIT PREPARED '$rac_gid2' through instance 2 while instance 1 refused"
n=$(prepared_through 3 "$rac_gid2")$(psql_at "$(proxy_dsn 3)" -c "SELECT count(*) FROM racaff_smoke_rac WHERE id = '$rac_gid2'")
[[ $n == 01 ]] && pass "rac: nothing left in doubt, the row committed once" \
    || fail "rac: after recovery: prepared count, row count = ${n:0:1}, ${n:1}"
"$FAULTS" heal 1 >/dev/null || abort "faults heal 1"
answers 1 && pass "rac: instance 1 answers after heal" || fail "rac: instance 1 still refusing after heal"

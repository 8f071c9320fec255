#!/bin/bash
# A successful CHAP login does not reset the guesses against another
# target. An initiator (iscsi-inq) that may log in to target "mine" guesses
# the secret of target "victim" (another authorized access): 4 wrong
# secrets for victim, then a right login to mine (which once cleared the
# address's failure count), then one more wrong secret for victim is the
# fifth in the window and blocks victim for that address and name: even
# the right secret for victim is then refused unchecked ("service
# unavailable"), while mine, counted apart, still lets the initiator in.
. "$(dirname "$0")/lib.sh"
need iscsi-inq timeout python3

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}
BASE=iqn.2026-11.org.blockd
INI=iqn.2026-01.test:guesser

blockd_start
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
all=$(jget "$(blockctl call iscsi.initiator.create '{}')" 'j["id"]')
i=0
for name in mine victim; do
    i=$((i + 1))
    blockctl call pool.dataset.create "{\"name\":\"demo/$name\",\"type\":\"VOLUME\",\"volsize\":16777216}" >/dev/null
    blockctl call iscsi.auth.create "{\"tag\":$i,\"user\":\"u$name\",\"secret\":\"secret-of-$name\"}" >/dev/null
    t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"$name\",\"groups\":[{\"portal\":$portal,\"initiator\":$all,\"authmethod\":\"CHAP\",\"auth\":$i}]}")" 'j["id"]')
    e=$(jget "$(blockctl call iscsi.extent.create "{\"name\":\"e-$name\",\"disk\":\"zvol/demo/$name\"}")" 'j["id"]')
    blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null
done
url() { echo "iscsi://u$1%$2@127.0.0.1:$ISCSI_PORT/$BASE:$1/0"; }
inq() { timeout 20 iscsi-inq -i "$INI" "$(url "$1" "$2")" >/dev/null 2>&1; }

inq mine secret-of-mine || fail "right CHAP secret for mine refused"
# The five failures must fall in the 10 s window: on a loaded machine a
# round may not fit, so it is repeated (a round that did not block leaves
# the count at most 4 when the next begins, since the window has passed).
blocked=
for round in 1 2 3; do
    t0=$(date +%s)
    for i in 1 2 3 4; do
        inq victim "guess$round$i" && fail "wrong secret $i for victim accepted"
    done
    inq mine secret-of-mine || fail "right secret for mine refused between the guesses"
    inq victim "guess${round}5" && fail "wrong secret 5 for victim accepted"
    if grep -q "CHAP: initiator '$INI' or its address blocked for 30 s after 5 failed logins to $BASE:victim" \
        "$BLOCKD_LOG"; then
        blocked=1
        break
    fi
    [ $(($(date +%s) - t0)) -ge 9 ] || fail "5 wrong secrets for victim within the window did not block it"
    sleep 11 # let the window pass before the next round
done
[ -n "$blocked" ] || fail "the five guesses never fitted in the 10 s window"
checked_before=$(grep -c "wrong CHAP response" "$BLOCKD_LOG")
inq victim secret-of-victim && fail "right secret for victim accepted while its guesser is blocked"
grep -q "CHAP refused: too many failed logins" "$BLOCKD_LOG" || fail "no refusal logged"
[ "$(grep -c "wrong CHAP response" "$BLOCKD_LOG")" = "$checked_before" ] ||
    fail "a response was checked while blocked"
# the other target, counted apart, still works
inq mine secret-of-mine || fail "the block on victim stopped logins to mine"
blockd_alive || fail "blockd died"
blockd_stop
pass "a CHAP success on one target does not reset the guesses against another"

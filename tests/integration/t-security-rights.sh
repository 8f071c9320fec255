#!/usr/bin/env bash
# Rights that an API key has and keeps only as long as it should:
# - every call carries its caller: a walk of the whole method table
#   (core.get_methods) through core.bulk, from WebSocket keys, is refused
#   exactly where the same call made directly is (account.* EPERM from a
#   full-admin key, every change EACCES from a read-only one), and
#   core.bulk ["account.set_password", …] makes no account;
# - roles: a READONLY_ADMIN key scrapes /metrics and reads every query,
#   *.config and get_instance (never EACCES), and gets EACCES on every
#   method that changes anything; a SHARING_ADMIN key creates and deletes
#   a dataset, an NBD export and an iSCSI share, but not a pool, a key, an
#   account or a global setting; the refusals are logged with the key's
#   name; api_key.update replaces a key's roles and ends its session;
# - events end with their rights: a subscribed client stops receiving job
#   events once its key is deleted (even the api_key.create another
#   client runs through core.bulk later), expires, or it logs out;
# - job history keeps no secret: core.get_jobs shows no API key, CHAP
#   secret or password that went through core.bulk; a read-only key reads
#   stored CHAP secrets as "********".
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 curl
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
export URL="ws://127.0.0.1:$WS_PORT/api/current"
jkey() { python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'; }
FULL=$(blockctl call api_key.create '{"name":"full"}' | jkey)
RO=$(blockctl call api_key.create '{"name":"prom","roles":["READONLY_ADMIN"]}' | jkey)
SHR=$(blockctl call api_key.create '{"name":"csi","roles":["SHARING_ADMIN"]}' | jkey)
VICTIM=$(blockctl call api_key.create '{"name":"victim"}' | jkey)
[ -n "$FULL" ] && [ -n "$RO" ] && [ -n "$SHR" ] && [ -n "$VICTIM" ] || fail "no API keys"
blockctl call api_key.create '{"name":"bad","roles":["ROOT"]}' >/dev/null 2>&1 &&
    fail "api_key.create accepted an unknown role"
blockctl call api_key.create '{"name":"none","roles":[]}' >/dev/null 2>&1 &&
    fail "api_key.create accepted an empty role list"
out=$(blockctl --json api key list)
grep -q READONLY_ADMIN <<<"$out" || fail "api key list does not show roles: $out"
blockctl volume create demo/v1 --size 16M >/dev/null || fail "volume create"

# ---- /metrics with a read-only key
code=$(curl -s -o "$TMP/m" -w '%{http_code}' -H "Authorization: Bearer $RO" \
    "http://127.0.0.1:$WS_PORT/metrics")
[ "$code" = 200 ] || fail "/metrics refused a read-only key: HTTP $code"
grep -q '^blockd_' "$TMP/m" || fail "/metrics with a read-only key: no blockd_ metrics"

cat >"$TMP/rights.py" <<'PY'
import json, re, sys, time
from wsclient import Client

FULL, RO, SHR, VICTIM = sys.argv[1:5]

class C(Client):
    """A client that keeps the notifications it receives between answers."""
    def __init__(self, key):
        super().__init__()
        self.events = []
        assert self.ok("auth.login_with_api_key", key) is True
        self.ok("core.set_options", {"legacy_jobs": False})

    def call(self, method, *params):
        self.n += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method,
                                 "params": list(params)}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == self.n:
                return r
            self.events.append(r)

def errno_of(r):
    e = r.get("error")
    if not e:
        return 0
    return (e.get("data") or {}).get("error", -1)

def bulk_errnos(c, method, calls):
    items = c.ok("core.bulk", method, calls)
    assert len(items) == len(calls), items
    return [(it.get("error_object") or {}).get("data", {}).get("error", -1)
            if it.get("error") is not None else 0 for it in items]

# Reads by name alone (not by the table under test): queries, configs,
# lookups, and the session and job methods every role has
# (nvmet.host.generate_key makes a key and stores nothing).
READ = re.compile(r"\.(query|get_instance|config|sessions|client_count|[a-z_]*_choices|"
                  r"ana_enabled|rdma_enabled|generate_key|"
                  r"validate_name|started|list_naming_schemas|getacl|presets|share_precheck|"
                  r"count_eligible_manual_snapshots|changed_blocks|allocated_blocks)$|"
                  r"^core\.|^auth\.|^system\.")

full, ro = C(FULL), C(RO)
methods = sorted(full.ok("core.get_methods"))
assert len(methods) > 80, len(methods)
changing = [m for m in methods if not READ.search(m)]
assert "pool.create" in changing and "api_key.create" in changing, changing

# 1. the walk: direct and through core.bulk, the same refusals
walked = 0
for m in methods:
    if m.startswith("auth.") or m in ("core.bulk", "core.job_wait"):
        continue  # the walker's own session; bulk of bulk is refused on its own
    for c, who in ((ro, "read-only"), (full, "full")):
        if who == "full" and not m.startswith("account."):
            continue  # a full key may change things: walk only what it may not call
        direct = errno_of(c.call(m))
        via = bulk_errnos(c, m, [[]])[0]
        if direct in (1, 13):  # EPERM, EACCES
            assert via == direct, (who, m, "direct", direct, "bulk", via)
        walked += 1
        if who == "read-only":
            if m.startswith("account."):
                assert direct == 1 and via == 1, (m, direct, via)  # local only
            elif m in changing:
                assert direct == 13, (m, "read-only key not refused", direct)
            else:
                assert direct != 13 and via != 13, (m, "read refused", direct, via)
        else:
            assert direct == 1 and via == 1, (m, "local-only method reached remotely", direct, via)
assert walked > len(changing), walked
# the attack: an account through core.bulk from a full-admin key
assert bulk_errnos(full, "account.set_password",
                   [[{"username": "evil", "password": "Evil-pass-2026"}]]) == [1]

# 2. a sharing key: datasets and shares, not pools, keys, accounts, settings
shr = C(SHR)
shr.ok("pool.dataset.create", {"name": "demo/shr", "type": "VOLUME", "volsize": 16 << 20})
shr.ok("nbd.export.create", {"name": "shr", "dataset": "demo/shr"})
shr.ok("zfs.snapshot.create", {"dataset": "demo/shr", "name": "s1"})
exports = shr.ok("nbd.export.query", [["name", "=", "shr"]])
shr.ok("nbd.export.delete", exports[0]["id"])
shr.ok("zfs.snapshot.delete", "demo/shr@s1")
shr.ok("pool.dataset.delete", "demo/shr")
for m, p in (("pool.create", {"name": "evil"}), ("api_key.create", {"name": "evil"}),
             ("api_key.delete", 1), ("nbd.global.update", {}), ("iscsi.global.update", {}),
             ("service.stop", "nbd")):
    assert errno_of(shr.call(m, p)) == 13, (m, "sharing key not refused")
    assert bulk_errnos(shr, m, [[p]]) == [13], (m, "sharing key not refused through core.bulk")
assert errno_of(shr.call("account.set_password",
                         {"username": "evil", "password": "Evil-pass-2026"})) == 1

# 3. attack 4 replayed: a subscriber whose key is deleted hears nothing more
victim = C(VICTIM)
victim.ok("core.subscribe", "core.get_jobs")
full.ok("core.bulk", "core.ping", [[]])
victim.ok("core.ping")  # answers come after the events queued before them
assert any(e.get("method") == "collection_update" for e in victim.events), \
    "the subscriber got no event while its key was valid"
keys = full.ok("api_key.query", [["name", "=", "victim"]])
full.ok("api_key.delete", keys[0]["id"])
victim.events.clear()
made = full.ok("core.bulk", "api_key.create", [[{"name": "late"}]])
newkey = made[0]["result"]["key"]
assert len(newkey) > 60, made
victim.call("core.ping")
assert not victim.events, ("events after the key was deleted", victim.events)
assert errno_of(victim.call("core.get_jobs")) == 207  # ENOTAUTHENTICATED: log in again

# a logout ends the subscription too
listener = C(FULL)
listener.ok("core.subscribe", "core.get_jobs")
listener.ok("auth.logout")
listener.events.clear()
full.ok("core.bulk", "core.ping", [[]])
listener.call("core.ping")
assert not listener.events, ("events after logout", listener.events)

# an expired key's subscription ends too (waits for the expiry, then checks)
expiry = int(time.time() * 1000) + 8000
made = full.ok("api_key.create", {"name": "brief", "expires_at": {"$date": expiry}})
brief = C(made["key"])
brief.ok("core.subscribe", "core.get_jobs")
while time.time() * 1000 < expiry + 500:
    time.sleep(0.5)
brief.events.clear()
full.ok("core.bulk", "core.ping", [[]])
assert errno_of(brief.call("core.get_jobs")) == 207, "an expired key still reads"
assert not brief.events, ("events after the key expired", brief.events)

# 4. no secret in job history
full.ok("core.bulk", "iscsi.auth.create",
        [[{"tag": 7, "user": "chapuser", "secret": "Chap-Secret-77", "peeruser": "peer",
           "peersecret": "Peer-Secret-88"}]])
full.ok("core.bulk", "auth.login", [["nobody", "Login-Pass-99"]])
jobs = json.dumps(full.ok("core.get_jobs"))
for secret in (newkey, "Chap-Secret-77", "Peer-Secret-88", "Login-Pass-99"):
    assert secret not in jobs, ("core.get_jobs shows a secret", secret[:6])
assert "********" in jobs
# a read-only key reads stored secrets redacted, as TrueNAS's READONLY_ADMIN
# does; keys that may change shares read them in clear (an edit form)
ro_auth = json.dumps(ro.ok("iscsi.auth.query", [["tag", "=", 7]]))
assert "chapuser" in ro_auth and "Chap-Secret-77" not in ro_auth and "********" in ro_auth, \
    ("a read-only key reads CHAP secrets", ro_auth[:200])
assert "Chap-Secret-77" in json.dumps(full.ok("iscsi.auth.query", [["tag", "=", 7]]))
# a read-only key sees only its own jobs
ro_jobs = json.dumps(ro.ok("core.get_jobs"))
assert "chapuser" not in ro_jobs and '"late"' not in ro_jobs, "a read-only key sees others' jobs"
assert "chapuser" in jobs and '"late"' in jobs, "the full key does not see every job"

# 5. api_key.update: a role change ends the key's sessions
keys = full.ok("api_key.query", [["name", "=", "csi"]])
row = full.ok("api_key.update", keys[0]["id"], {"roles": ["READONLY_ADMIN"]})
assert row["roles"] == ["READONLY_ADMIN"], row
assert errno_of(shr.call("pool.dataset.query")) == 207, "old session kept its roles"
shr2 = C(SHR)
assert errno_of(shr2.call("pool.dataset.create",
                          {"name": "demo/shr2", "type": "VOLUME", "volsize": 16 << 20})) == 13
print("walked", walked, "calls over", len(methods), "methods")
PY
PYTHONPATH="$(dirname "$0")" /usr/bin/python3 "$TMP/rights.py" "$FULL" "$RO" "$SHR" "$VICTIM" ||
    fail "rights checks failed"

out=$(blockctl user list)
grep -q evil <<<"$out" && fail "core.bulk made an account from the network"
grep -q "refused: API key 'prom' has role READONLY_ADMIN" "$BLOCKD_LOG" ||
    fail "a refused call is not logged with the key's name"
grep -q "subscription .* ended: its credential (victim)" "$BLOCKD_LOG" ||
    fail "the ended subscription is not logged"
for s in Chap-Secret-77 Peer-Secret-88 Login-Pass-99 Evil-pass-2026; do
    grep -q "$s" "$BLOCKD_LOG" && fail "the log shows a secret"
done
blockd_stop
pass

#!/usr/bin/env bash
# ctest: scripts/netns-sites.sh makes shaped namespaces (2 MB at 8 Mbit/s takes >= 1.6 s) and
# removes all of it again. Exits 77 (skipped) where namespaces cannot be made (not root).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export DILOCO_NETNS_PREFIX=dlt
net="$root/scripts/netns-sites.sh"
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null || [[ ! -x /usr/bin/python3 ]]; then
  echo "skipped: needs root, iproute2 and /usr/bin/python3"; exit 77
fi
ip netns add dlt-probe 2>/dev/null || { echo "skipped: cannot create network namespaces here"; exit 77; }
ip netns del dlt-probe
trap '"$net" down' EXIT
"$net" up --rate 8mbit alpha beta
syncer=$("$net" addr alpha)
"$net" exec syncer -- /usr/bin/python3 "$root/tests/scripts/shaped_transfer.py" serve "$syncer" 5077 > received.txt &
server=$!
sleep 0.3
secs=$("$net" exec alpha -- /usr/bin/python3 "$root/tests/scripts/shaped_transfer.py" send "$syncer" 5077 2000000)
wait $server
echo "2 MB from alpha to the syncer at 8 Mbit/s: $secs s, received $(cat received.txt) bytes"
[[ $(cat received.txt) == 2000000 ]]
awk -v s="$secs" 'BEGIN { exit !(s >= 1.6) }' || { echo "not shaped: $secs s"; exit 1; }
"$net" down
trap - EXIT
[[ -z $(ip netns list | grep '^dlt-' || true) ]] || { echo "namespaces left behind"; exit 1; }
echo "ok: shaped and cleaned up"

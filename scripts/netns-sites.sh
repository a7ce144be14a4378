#!/usr/bin/env bash
# Puts each site in its own network namespace, joined to the syncer's namespace by a veth pair
# whose both ends are shaped by the kernel's token-bucket filter (tc tbf), so that traffic
# between processes crosses a real, bandwidth-limited network. (Latency stays in the
# in-process link emulation: the netem qdisc is not available on these machines.)
#
#   scripts/netns-sites.sh up [--rate 20mbit] [--burst 32kbit] SITE...   create (needs root)
#   scripts/netns-sites.sh exec NAME -- CMD...                           run CMD in dl-NAME
#   scripts/netns-sites.sh addr SITE                                     syncer address seen from SITE
#   scripts/netns-sites.sh down                                          remove everything it made
#
# Namespaces: dl-syncer and dl-SITE (prefix from DILOCO_NETNS_PREFIX); site i (0-based) is 10.77.i.2/30, the syncer 10.77.i.1/30
# (private addresses that exist only inside these namespaces). A failing `up` removes what it
# made before it exits.
set -euo pipefail

# DILOCO_NETNS_PREFIX lets two set-ups (e.g. a test and a demo) coexist; default "dl".
tag=${DILOCO_NETNS_PREFIX:-dl}
[[ $tag =~ ^[a-z]{1,4}$ ]] || { echo "netns-sites: DILOCO_NETNS_PREFIX must be 1-4 lower-case letters" >&2; exit 2; }
prefix="${tag}-"
state="/run/diloco-netns-${tag}"
die() { echo "netns-sites: $*" >&2; exit 2; }

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${prefix}" || true); do
    ip netns del "$ns" 2>/dev/null || true  # deleting a namespace removes its veth ends
  done
  rm -rf "$state"
}

up() {
  local rate=20mbit burst=32kbit sites=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --rate) rate=$2; shift 2 ;;
      --burst) burst=$2; shift 2 ;;
      -*) die "unknown option $1" ;;
      *) sites+=("$1"); shift ;;
    esac
  done
  [[ ${#sites[@]} -ge 1 && ${#sites[@]} -le 200 ]] || die "name 1 to 200 sites"
  [[ $(id -u) -eq 0 ]] || die "needs root (ip netns, tc)"
  trap 'echo "netns-sites: setup failed, removing what was made" >&2; down' ERR
  down
  mkdir -p "$state"
  ip netns add "${prefix}syncer"
  ip -n "${prefix}syncer" link set lo up
  local i=0
  for site in "${sites[@]}"; do
    [[ $site =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,11}$ ]] || die "site name '$site': 1-12 letters, digits, _ or -"
    local ns="${prefix}${site}" a="${tag}v${i}s" b="${tag}v${i}c"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "${prefix}syncer"
    ip link set "$b" netns "$ns"
    ip -n "${prefix}syncer" addr add "10.77.${i}.1/30" dev "$a"
    ip -n "$ns" addr add "10.77.${i}.2/30" dev "$b"
    ip -n "${prefix}syncer" link set "$a" up
    ip -n "$ns" link set "$b" up
    # Shape both directions: site -> syncer on the site's end, syncer -> site on the syncer's.
    ip netns exec "$ns" tc qdisc add dev "$b" root tbf rate "$rate" burst "$burst" latency 400ms
    ip netns exec "${prefix}syncer" tc qdisc add dev "$a" root tbf rate "$rate" burst "$burst" latency 400ms
    echo "10.77.${i}.1" > "$state/$site"
    echo "site $site: namespace $ns, address 10.77.${i}.2, syncer at 10.77.${i}.1, $rate each way"
    i=$((i + 1))
  done
  trap - ERR
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  exec)
    [[ $# -ge 4 && $3 == "--" ]] || die "usage: $0 exec NAME -- CMD..."
    ns="${prefix}$2"; shift 3
    exec ip netns exec "$ns" "$@" ;;
  addr)
    [[ -f "$state/${2:-}" ]] || die "no site '${2:-}' (run up first)"
    cat "$state/$2" ;;
  *) die "usage: $0 up [--rate R] [--burst B] SITE... | exec NAME -- CMD... | addr SITE | down" ;;
esac

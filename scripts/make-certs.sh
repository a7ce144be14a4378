#!/usr/bin/env bash
# Makes a run's certificate authority and one certificate per site (and the syncer) with the
# openssl CLI, for mutual TLS between sites:
#   scripts/make-certs.sh OUT_DIR NAME...        e.g. scripts/make-certs.sh certs syncer us-west us-east
#   scripts/make-certs.sh OUT_DIR --server NAME  a server certificate for a syncer named NAME (net.syncer_name)
#   scripts/make-certs.sh OUT_DIR --replica NAME a certificate for a syncer replica NAME ([[syncers]]): it
#                                                serves sites as the leader and dials the leader as a follower
#                                                (serverAuth and clientAuth)
# Writes OUT_DIR/ca.pem (trust anchor), OUT_DIR/ca.key (keep it private), and for each NAME
# OUT_DIR/NAME.key + OUT_DIR/NAME.pem, a certificate with CN=NAME signed by the CA. "syncer" and
# every NAME after --server get a server certificate (extended key usage serverAuth only), every
# other NAME a site certificate (clientAuth only): a site cannot pose as the syncer, and sites
# check that the server's certificate names the syncer. The syncer maps a peer's certificate CN
# to the site it may speak for. Existing files are never overwritten.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_DIR [--server|--replica] NAME..." >&2
  exit 2
fi
out=$1
shift
days=${CERT_DAYS:-365}
mkdir -p "$out"
umask 077

if [[ ! -f "$out/ca.key" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -sha256 -days "$days" -subj "/CN=diloco-run-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.pem"
  echo "made $out/ca.pem"
fi

server_next=0
replica_next=0
for name in "$@"; do
  if [[ $name == --server ]]; then server_next=1; continue; fi
  if [[ $name == --replica ]]; then replica_next=1; continue; fi
  usage=clientAuth
  if [[ $server_next -eq 1 || $name == syncer ]]; then usage=serverAuth; fi
  if [[ $replica_next -eq 1 ]]; then usage=serverAuth,clientAuth; fi
  server_next=0
  replica_next=0
  if [[ ! "$name" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
    echo "$0: '$name' is not a valid site name (letters, digits, . _ -)" >&2
    exit 2
  fi
  [[ -f "$out/$name.pem" ]] && { echo "kept $out/$name.pem"; continue; }
  openssl ecparam -name prime256v1 -genkey -noout -out "$out/$name.key"
  openssl req -new -key "$out/$name.key" -subj "/CN=$name" -out "$out/$name.csr"
  ext=$(mktemp)
  trap 'rm -f "$ext"' EXIT
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\nextendedKeyUsage=%s\nsubjectAltName=DNS:%s\n' "$usage" "$name" > "$ext"
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -days "$days" -sha256 -extfile "$ext" -out "$out/$name.pem" 2>/dev/null
  rm -f "$out/$name.csr" "$ext"
  openssl verify -CAfile "$out/ca.pem" "$out/$name.pem" >/dev/null
  echo "made $out/$name.pem (CN=$name, $usage)"
done

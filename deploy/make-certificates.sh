#!/bin/sh
# Makes a CA and one certificate per ptyhub service, for TLS between the services (see
# deploy/README.md): DIR/tls-ca.pem, and DIR/<service>.pem with DIR/<service>-key.pem for
# pty-broker, session-api and gateway. Each certificate names its compose and Kubernetes
# service hosts, and may be used to serve and to call (mutual TLS). And DIR/public.pem with
# DIR/public-key.pem: the certificate the gateway's public port serves in the compose file,
# for localhost, 127.0.0.1 and PUBLIC_NAMES, which may serve only (clients that trust
# tls-ca.pem accept it; replace it with one browsers trust). Needs openssl.
#
#   deploy/make-certificates.sh DIR [EXTRA_BROKER_NAMES] [PUBLIC_NAMES]
#
# EXTRA_BROKER_NAMES: more subjectAltName entries for the broker certificate, comma-separated
# (for example "IP:10.0.0.5,DNS:node-1"), for brokers dialled at node addresses.
# PUBLIC_NAMES: more subjectAltName entries for public.pem (for example
# "DNS:terminals.example.com"): the names clients use to reach the gateway.
set -eu
dir=${1:?usage: make-certificates.sh DIR [EXTRA_BROKER_NAMES] [PUBLIC_NAMES]}
extra=${2:-}
public_names=${3:-}
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825 \
  -subj "/CN=ptyhub CA" -keyout tls-ca-key.pem -out tls-ca.pem 2>/dev/null
for service in pty-broker session-api gateway; do
  names="DNS:$service,DNS:$service.ptyhub.svc,DNS:$service.ptyhub.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
  if [ "$service" = pty-broker ] && [ -n "$extra" ]; then names="$names,$extra"; fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$service" \
    -keyout "$service-key.pem" -out "$service.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$names" > "$service.ext"
  openssl x509 -req -in "$service.csr" -CA tls-ca.pem -CAkey tls-ca-key.pem -CAcreateserial \
    -days 825 -extfile "$service.ext" -out "$service.pem" 2>/dev/null
  rm -f "$service.csr" "$service.ext"
done
names="DNS:localhost,IP:127.0.0.1"
if [ -n "$public_names" ]; then names="$names,$public_names"; fi
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=ptyhub" \
  -keyout public-key.pem -out public.csr 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$names" > public.ext
openssl x509 -req -in public.csr -CA tls-ca.pem -CAkey tls-ca-key.pem -CAcreateserial \
  -days 825 -extfile public.ext -out public.pem 2>/dev/null
rm -f public.csr public.ext tls-ca.srl
echo "made tls-ca.pem, a certificate for pty-broker, session-api and gateway, and public.pem in $dir"
echo "keep tls-ca-key.pem somewhere safe (it signs new certificates) and out of the services"

#!/usr/bin/env bash
# Makes a CA and a serving certificate for the restore-hooks webhook, for installs without
# cert-manager (certManager.enabled=false).
#
#   certs/make-certs.sh SERVICE NAMESPACE [OUTDIR]
#
# SERVICE is the chart's Service name (the release's full name, e.g. "restore-hooks"), NAMESPACE
# the release namespace. Writes into OUTDIR (default ./certs/out):
#   ca.crt   the CA certificate (its base64 is the chart's tls.caBundle)
#   ca.key   the CA key (keep it offline, or delete it and re-run to rotate)
#   tls.crt  the serving certificate followed by the CA (chain)
#   tls.key  the serving key: ECDSA P-256, PKCS#8
# The serving certificate's SANs: SERVICE, SERVICE.NAMESPACE, SERVICE.NAMESPACE.svc,
# SERVICE.NAMESPACE.svc.cluster.local. Environment: CA_DAYS (default 3650), CERT_DAYS (default 365).
# An existing ca.crt/ca.key pair in OUTDIR is reused, so re-running renews only the serving
# certificate and the caBundle stays the same.
set -euo pipefail

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 2 ] && [ $# -le 3 ] || usage
SERVICE="$1"
NAMESPACE="$2"
OUTDIR="${3:-./certs/out}"
CA_DAYS="${CA_DAYS:-3650}"
CERT_DAYS="${CERT_DAYS:-365}"

dns1123='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
printf '%s' "$SERVICE" | grep -Eq "$dns1123" || { echo "make-certs: invalid SERVICE name: $SERVICE" >&2; exit 2; }
printf '%s' "$NAMESPACE" | grep -Eq "$dns1123" || { echo "make-certs: invalid NAMESPACE name: $NAMESPACE" >&2; exit 2; }
command -v openssl >/dev/null 2>&1 || { echo "make-certs: openssl is required" >&2; exit 1; }

mkdir -p "$OUTDIR"
umask 077
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -s "$OUTDIR/ca.crt" ] && [ -s "$OUTDIR/ca.key" ]; then
  echo "make-certs: reusing the CA in $OUTDIR (delete ca.crt and ca.key to make a new one)" >&2
else
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$OUTDIR/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$OUTDIR/ca.key" -sha256 -days "$CA_DAYS" \
    -subj "/O=restore-hooks/OU=${NAMESPACE}/CN=${SERVICE}-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$OUTDIR/ca.crt"
fi

# Serving key: ECDSA P-256; genpkey writes PKCS#8 ("BEGIN PRIVATE KEY").
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/tls.key" 2>/dev/null
openssl req -new -key "$work/tls.key" -subj "/O=restore-hooks/CN=${SERVICE}.${NAMESPACE}.svc" -out "$work/tls.csr"
cat > "$work/ext.cnf" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
subjectAltName=DNS:${SERVICE},DNS:${SERVICE}.${NAMESPACE},DNS:${SERVICE}.${NAMESPACE}.svc,DNS:${SERVICE}.${NAMESPACE}.svc.cluster.local
EXT
openssl x509 -req -in "$work/tls.csr" -CA "$OUTDIR/ca.crt" -CAkey "$OUTDIR/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -days "$CERT_DAYS" -sha256 \
  -extfile "$work/ext.cnf" -out "$work/leaf.crt" 2>/dev/null

openssl verify -CAfile "$OUTDIR/ca.crt" "$work/leaf.crt" >/dev/null
grep -q 'BEGIN PRIVATE KEY' "$work/tls.key" || { echo "make-certs: key is not PKCS#8" >&2; exit 1; }

cat "$work/leaf.crt" "$OUTDIR/ca.crt" > "$OUTDIR/tls.crt"
cp "$work/tls.key" "$OUTDIR/tls.key"
chmod 600 "$OUTDIR/tls.key" "$OUTDIR/ca.key"
chmod 644 "$OUTDIR/tls.crt" "$OUTDIR/ca.crt"

CA_BUNDLE="$(base64 < "$OUTDIR/ca.crt" | tr -d '\n')"
SECRET="${SERVICE}-tls"
{
  echo "Wrote $OUTDIR/ca.crt, $OUTDIR/ca.key, $OUTDIR/tls.crt (leaf + CA), $OUTDIR/tls.key (ECDSA P-256, PKCS#8)"
  echo "Serving certificate valid for: ${SERVICE}, ${SERVICE}.${NAMESPACE}, ${SERVICE}.${NAMESPACE}.svc, ${SERVICE}.${NAMESPACE}.svc.cluster.local"
  echo "Expires: $(openssl x509 -in "$work/leaf.crt" -noout -enddate | cut -d= -f2)"
  echo
  echo "Create the Secret:"
  echo "  kubectl -n ${NAMESPACE} create secret tls ${SECRET} --cert=${OUTDIR}/tls.crt --key=${OUTDIR}/tls.key"
  echo "  (to replace it later: add --dry-run=client -o yaml | kubectl apply -f -)"
  echo
  echo "Install the chart with:"
  echo "  --set certManager.enabled=false --set tls.existingSecret=${SECRET} --set tls.caBundle=\$(cat ${OUTDIR}/cabundle.b64)"
  echo
  echo "caBundle (base64 of ca.crt, also in ${OUTDIR}/cabundle.b64):"
} >&2
printf '%s\n' "$CA_BUNDLE" > "$OUTDIR/cabundle.b64"
chmod 644 "$OUTDIR/cabundle.b64"
printf '%s\n' "$CA_BUNDLE"

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"path/filepath"
	"time"

	capi "k8s.io/api/certificates/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/kubernetes/pkg/controller/certificates/authority"
)

// pki is the control plane's own certificate authority (in DIR/pki: ca.crt,
// ca.key), the API server's serving certificate and the service-account
// signing key. Certificates are signed as the controller manager's CSR
// signer signs them.
type pki struct {
	dir                             string
	ca                              *authority.CertificateAuthority
	CAFile                          string
	ServingCertFile, ServingKeyFile string
	// SAKeyFile holds the private key; the API server reads the public key
	// that verifies tokens from the same file.
	SAKeyFile string
}

// makePKI writes a fresh CA, a serving certificate for 127.0.0.1/localhost
// and the in-cluster service names, and an RSA service-account key.
func makePKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caCert, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "localkube-ca"}, caKey)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: &authority.CertificateAuthority{Certificate: caCert, PrivateKey: caKey},
		CAFile: filepath.Join(dir, "ca.crt"), SAKeyFile: filepath.Join(dir, "sa.key")}
	if err := writeKey(filepath.Join(dir, "ca.key"), caKey); err != nil {
		return nil, err
	}
	if err := cert.WriteCert(p.CAFile, pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: caCert.Raw})); err != nil {
		return nil, err
	}
	p.ServingCertFile, p.ServingKeyFile, err = p.issue("kube-apiserver", []string{
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)}, capi.UsageKeyEncipherment, capi.UsageServerAuth)
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return p, writeKey(p.SAKeyFile, saKey)
}

// issue writes NAME.crt and NAME.key: a fresh key, and a certificate for it
// that the CA signs with the given usages (and digital signature), valid as
// long as the CA.
func (p *pki) issue(name string, dnsNames []string, ips []net.IP, usages ...capi.KeyUsage) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: name}, DNSNames: dnsNames, IPAddresses: ips,
	}, key)
	if err != nil {
		return "", "", err
	}
	der, err := p.ca.Sign(csr, authority.PermissiveSigningPolicy{
		TTL: 10 * 365 * 24 * time.Hour, Usages: append(usages, capi.UsageDigitalSignature),
	})
	if err != nil {
		return "", "", err
	}
	certFile, keyFile := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	if err := cert.WriteCert(certFile, pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writeKey(keyFile, key)
}

func writeKey(path string, key any) error {
	data, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return keyutil.WriteKey(path, data)
}

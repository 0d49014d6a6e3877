"""TLS and mutual TLS to the client port (certificates made with the openssl command)."""

from __future__ import annotations

import subprocess

import pytest

import picket
from conftest import TMP, Cluster

NS = "orders"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki():
    d = TMP / "pki"
    d.mkdir(exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=picket-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, san in (("node", "IP:127.0.0.1,DNS:localhost"), ("client", "DNS:python-client")):
        (d / f"{name}.ext").write_text(
            f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile",
                f"{name}.ext", cwd=d)
    return d


def test_tls_with_the_cluster_ca(pki):
    cluster = Cluster(tls={"ca": pki / "ca.pem", "cert": pki / "node.pem", "key": pki / "node.key"})
    try:
        cluster.wait_ready(ca=pki / "ca.pem")
        client = cluster.client(ca=(pki / "ca.pem").read_bytes())
        with client.session() as session, session.lock(NS, "tls") as lock:
            assert lock.token > 0
        assert client.leader.startswith("https://")
        plaintext = picket.Client([f"http://{e}" for e in cluster.endpoints], retry_budget=1)
        with pytest.raises(picket.UnavailableError) as raised:
            plaintext.session()
        assert raised.value.tls_mismatch == "plaintext_to_tls", raised.value
        untrusted = picket.Client(cluster.endpoints, tls=True, retry_budget=1)
        with pytest.raises(picket.UnavailableError) as raised:
            untrusted.session()
        assert raised.value.tls_mismatch == "untrusted_server", raised.value
    finally:
        cluster.stop()


def test_mutual_tls(pki):
    cluster = Cluster(tls={"ca": pki / "ca.pem", "cert": pki / "node.pem",
                           "key": pki / "node.key", "require_client_cert": True})
    try:
        mtls = {"ca": pki / "ca.pem", "cert": pki / "client.pem", "key": pki / "client.key"}
        cluster.wait_ready(**mtls)
        client = cluster.client(**mtls)
        with client.session() as session, session.lock(NS, "mtls") as lock:
            assert lock.token > 0
        no_cert = cluster.client(ca=pki / "ca.pem", retry_budget=1)
        with pytest.raises(picket.PicketError) as raised:
            no_cert.session()
        assert raised.value.rule in ("unavailable", "unauthenticated"), raised.value
        with pytest.raises(picket.ConfigError) as raised:
            cluster.client(ca=pki / "ca.pem", cert=pki / "client.pem")
        assert raised.value.rule == "bad_tls"
        with pytest.raises(picket.ConfigError) as raised:
            cluster.client(ca=pki / "missing.pem")
        assert raised.value.rule == "bad_tls" and "ca" in str(raised.value)
    finally:
        cluster.stop()

//! Certificates for the TLS tests, made with openssl: a CA, a server
//! certificate it signed for `localhost` and 127.0.0.1, and a second CA
//! that signed nothing of ours (the "wrong CA").

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::scratch_dir;

pub struct TestCerts {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub wrong_ca: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/services installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl TestCerts {
    /// Makes them in a fresh scratch directory.
    pub fn generate() -> TestCerts {
        let dir = scratch_dir();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for name in ["ca", "wrong-ca"] {
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            let subject = format!("/CN=tickler test {name}");
            let key = format!("{name}.key");
            let pem = format!("{name}.pem");
            args.extend([
                "-keyout",
                &key,
                "-out",
                &pem,
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(&dir, &args);
        }
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&dir, &args);
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
        // mariadbd runs as root here but reads its files as any user would.
        TestCerts {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            wrong_ca: dir.join("wrong-ca.pem"),
        }
    }
}

pub fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

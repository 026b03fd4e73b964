// Certificates for mTLS tests, made in process with OpenSSL (no files, no
// openssl CLI): a CA, and leaf certificates it signs with the
// subjectAltNames a test names, each usable as a server and a client
// certificate (extendedKeyUsage serverAuth, clientAuth). EC P-256, valid
// from an hour ago for a day. Aborts on an OpenSSL failure (test-only).
#pragma once

#include <string>

namespace floe::testing {

struct TestCert {
  std::string cert_pem;
  std::string key_pem;
};

class TestCa {
 public:
  TestCa();  // a self-signed CA named "floe test CA"
  ~TestCa();
  TestCa(const TestCa&) = delete;
  TestCa& operator=(const TestCa&) = delete;

  const std::string& cert_pem() const { return ca_.cert_pem; }
  // `sans`: OpenSSL's subjectAltName syntax, e.g. "DNS:localhost,IP:127.0.0.1".
  TestCert Issue(const std::string& common_name, const std::string& sans) const;

 private:
  TestCert ca_;
  void* key_ = nullptr;   // EVP_PKEY*
  void* cert_ = nullptr;  // X509*
};

}  // namespace floe::testing

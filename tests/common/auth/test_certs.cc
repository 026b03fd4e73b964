#include "tests/common/auth/test_certs.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace floe::testing {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "test_certs: %s failed\n", what);
  std::abort();
}

EVP_PKEY* NewKey() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  Check(key != nullptr, "EVP_EC_gen");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  Check(ext != nullptr, "X509V3_EXT_conf_nid");
  Check(X509_add_ext(cert, ext, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(ext);
}

// `issuer` null: self-signed by `key`.
X509* MakeCert(EVP_PKEY* key, const std::string& common_name, const std::string& sans, X509* issuer,
               EVP_PKEY* issuer_key) {
  X509* cert = X509_new();
  Check(cert != nullptr, "X509_new");
  X509_set_version(cert, 2);
  std::random_device entropy;  // serials must differ between certificates of one CA
  ASN1_INTEGER_set(X509_get_serialNumber(cert), static_cast<long>(entropy() & 0x7fffffff));
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  Check(X509_set_pubkey(cert, key) == 1, "X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer ? issuer : cert;
  AddExtension(cert, signer, NID_subject_key_identifier, "hash");
  if (!issuer) {
    AddExtension(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert, signer, NID_authority_key_identifier, "keyid:always");
    AddExtension(cert, signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert, signer, NID_key_usage, "critical,digitalSignature");
    AddExtension(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth");
    if (!sans.empty()) AddExtension(cert, signer, NID_subject_alt_name, sans);
  }
  Check(X509_sign(cert, issuer ? issuer_key : key, EVP_sha256()) > 0, "X509_sign");
  return cert;
}

template <typename Write>
std::string ToPem(Write write) {
  BIO* bio = BIO_new(BIO_s_mem());
  Check(bio != nullptr && write(bio) == 1, "PEM_write");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

TestCert Encode(X509* cert, EVP_PKEY* key) {
  return {ToPem([&](BIO* b) { return PEM_write_bio_X509(b, cert); }),
          ToPem([&](BIO* b) { return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); })};
}

}  // namespace

TestCa::TestCa() {
  EVP_PKEY* key = NewKey();
  X509* cert = MakeCert(key, "floe test CA", "", nullptr, nullptr);
  ca_ = Encode(cert, key);
  key_ = key;
  cert_ = cert;
}

TestCa::~TestCa() {
  X509_free(static_cast<X509*>(cert_));
  EVP_PKEY_free(static_cast<EVP_PKEY*>(key_));
}

TestCert TestCa::Issue(const std::string& common_name, const std::string& sans) const {
  EVP_PKEY* key = NewKey();
  X509* cert = MakeCert(key, common_name, sans, static_cast<X509*>(cert_), static_cast<EVP_PKEY*>(key_));
  TestCert out = Encode(cert, key);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

}  // namespace floe::testing

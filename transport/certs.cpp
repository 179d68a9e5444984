#include "transport/certs.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <asio/ip/address.hpp>

namespace quartet::transport {

namespace {

template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Deleter<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free>>;

[[noreturn]] void fail(const std::string& what) {
  const unsigned long e = ERR_get_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  throw std::runtime_error("making certificates: " + what + " failed" + (reason ? std::string(": ") + reason : ""));
}

KeyPtr make_key() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) fail("generating a P-256 key");
  return key;
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr || X509_add_ext(cert, ext, -1) != 1) fail("adding " + std::string(OBJ_nid2sn(nid)) + " " + value);
  X509_EXTENSION_free(ext);
}

struct Signer {
  X509* cert;       // null: the certificate signs itself
  EVP_PKEY* key;
};

// One certificate for `key` with subject CN=`name`, signed by `by` (itself when by.cert
// is null), carrying `extensions` (nid, value) in order.
CertPtr make_cert(const std::string& name, EVP_PKEY* key, Signer by, int days,
                  const std::vector<std::pair<int, std::string>>& extensions) {
  CertPtr cert(X509_new());
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) fail("drawing a serial number");
  serial[0] &= 0x7F;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  const long hour = 3600, day = 24 * hour;
  const long not_after = days * day;
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), std::min(0L, not_after) - hour);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("Quartet"), -1, -1,
                             0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1,
                             -1, 0);
  X509* issuer = by.cert != nullptr ? by.cert : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer));
  if (X509_set_pubkey(cert.get(), key) != 1) fail("setting the public key");
  for (const auto& [nid, value] : extensions) add_extension(cert.get(), issuer, nid, value);
  if (X509_sign(cert.get(), by.key, EVP_sha256()) == 0) fail("signing " + name);
  return cert;
}

std::string pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) fail("writing a certificate");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    fail("writing a private key");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string subject_alt_names(const std::vector<std::string>& hosts) {
  std::string sans;
  for (const std::string& h : hosts) {
    asio::error_code ec;
    asio::ip::make_address(h, ec);
    if (!sans.empty()) sans += ',';
    sans += ec ? "DNS:" : "IP:";
    sans += h;
  }
  return sans;
}

}  // namespace

CertificateSet make_certificates(const CertificateOptions& options) {
  if (options.hosts.empty()) throw std::invalid_argument("make_certificates: at least one host");
  const KeyPtr ca_key = make_key(), server_key = make_key(), client_key = make_key();
  const std::string key_id = "hash";
  const CertPtr ca = make_cert("Quartet test CA", ca_key.get(), {nullptr, ca_key.get()}, options.days,
                               {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                {NID_subject_key_identifier, key_id}});
  const Signer by_ca{ca.get(), ca_key.get()};
  const CertPtr server = make_cert(options.hosts.front(), server_key.get(), by_ca, options.days,
                                   {{NID_basic_constraints, "critical,CA:FALSE"},
                                    {NID_key_usage, "critical,digitalSignature"},
                                    {NID_ext_key_usage, "serverAuth,clientAuth"},
                                    {NID_subject_key_identifier, key_id},
                                    {NID_authority_key_identifier, "keyid:always"},
                                    {NID_subject_alt_name, subject_alt_names(options.hosts)}});
  const CertPtr client = make_cert("Quartet client", client_key.get(), by_ca, options.days,
                                   {{NID_basic_constraints, "critical,CA:FALSE"},
                                    {NID_key_usage, "critical,digitalSignature"},
                                    {NID_ext_key_usage, "clientAuth"},
                                    {NID_subject_key_identifier, key_id},
                                    {NID_authority_key_identifier, "keyid:always"}});
  return {pem(ca.get()), pem(ca_key.get()), pem(server.get()), pem(server_key.get()), pem(client.get()),
          pem(client_key.get())};
}

}  // namespace quartet::transport

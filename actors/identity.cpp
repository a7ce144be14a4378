// Proof that a peer holds the key of a site's certificate (OpenSSL 3): challenge, signature,
// chain and CN checks. No CAF here: the gateway and connector actors call these.
#include "diloco/actors/identity.hpp"

#include <fstream>
#include <iterator>
#include <memory>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "diloco/door.hpp"

namespace diloco::actors {

namespace {

template <class T, void (*F)(T*)>
struct Free {
  void operator()(T* p) const { F(p); }
};
using BioPtr = std::unique_ptr<BIO, Free<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Free<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY, EVP_PKEY_free>>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, Free<EVP_MD_CTX, EVP_MD_CTX_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Free<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Free<X509_STORE_CTX, X509_STORE_CTX_free>>;

std::string ssl_error(const char* what) {
  char buf[256];
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (!e) return what;
  ERR_error_string_n(e, buf, sizeof buf);
  return std::string(what) + ": " + buf;
}

}  // namespace

Bytes random_nonce(std::size_t n) {
  Bytes b(n);
  if (RAND_bytes(b.data(), static_cast<int>(n)) != 1) throw std::runtime_error(ssl_error("RAND_bytes"));
  return b;
}

Bytes challenge_message(const std::string& site, const Bytes& nonce) {
  static constexpr char context[] = "diloco site proof v1";
  Bytes m(context, context + sizeof context);  // includes the NUL: separates the fields
  m.insert(m.end(), site.begin(), site.end());
  m.push_back(0);
  m.insert(m.end(), nonce.begin(), nonce.end());
  return m;
}

Bytes read_bytes(const std::string& path, std::string* err) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (err) *err = "cannot read " + path;
    return {};
  }
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Bytes sign_with_key(const std::string& key_file, const Bytes& msg, std::string* err) {
  auto pem = read_bytes(key_file, err);
  if (pem.empty()) return {};
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    if (err) *err = ssl_error(("no private key in " + key_file).c_str());
    return {};
  }
  MdCtxPtr md(EVP_MD_CTX_new());
  std::size_t len = 0;
  if (EVP_DigestSignInit(md.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(md.get(), nullptr, &len, msg.data(), msg.size()) != 1) {
    if (err) *err = ssl_error("EVP_DigestSign");
    return {};
  }
  Bytes sig(len);
  if (EVP_DigestSign(md.get(), sig.data(), &len, msg.data(), msg.size()) != 1) {
    if (err) *err = ssl_error("EVP_DigestSign");
    return {};
  }
  sig.resize(len);
  return sig;
}

std::string verify_site_proof(const std::string& ca_file, const Bytes& cert_pem, const std::string& site,
                              const Bytes& msg, const Bytes& sig) {
  if (cert_pem.empty() || cert_pem.size() > kMaxCertificateBytes) return "certificate missing or too large";
  BioPtr bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return ssl_error("not a PEM certificate");
  // Chain to the run's CA (validity dates included).
  StorePtr store(X509_STORE_new());
  if (X509_STORE_load_file(store.get(), ca_file.c_str()) != 1) return ssl_error(("cannot load CA " + ca_file).c_str());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) return ssl_error("X509_STORE_CTX_init");
  if (X509_verify_cert(ctx.get()) != 1)
    return std::string("certificate does not verify against the run's CA: ") +
           X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  // The certificate speaks for the site named in its CN, and only for that one.
  char cn[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn) < 0)
    return "certificate has no CN";
  if (site != cn) return "certificate CN=" + std::string(cn) + " cannot speak for site '" + site + "'";
  // Possession of the certificate's key: the signature of this challenge.
  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  if (!pub) return ssl_error("certificate without public key");
  MdCtxPtr md(EVP_MD_CTX_new());
  if (EVP_DigestVerifyInit(md.get(), nullptr, EVP_sha256(), nullptr, pub) != 1) return ssl_error("EVP_DigestVerifyInit");
  if (EVP_DigestVerify(md.get(), sig.data(), sig.size(), msg.data(), msg.size()) != 1) {
    ERR_clear_error();
    return "signature of the challenge does not match the certificate's key";
  }
  return {};
}

}  // namespace diloco::actors

#include "etcd/etcd_tls.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <memory>

#include "common/read_file.h"
#include "common/sigpipe.h"

namespace headroom::etcd {
namespace {

// A failure within this share of the timeout came from the other end (it closed the
// connection), not from the clock.
constexpr double kQuickShareOfTimeout = 0.9;

// How long an alert may take to follow a handshake: a round trip, and etcd's check of the
// certificate.
constexpr double kAlertWaitS = 1.0;

// The path a probe of plain HTTP asks for: etcd answers it without auth.
constexpr const char* kProbePath = "/version";

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// This thread's OpenSSL errors, taken from its queue (which they leave empty): the first
// that says something, and the first alert the other end sent. httplib shuts a failed
// connection down after the failure, which adds errors that say only that ("shutdown while in
// init"): they are passed over.
struct OpenSslErrors {
  unsigned long first = 0;  // 0: none
  unsigned long alert = 0;  // 0: none
};

// The TLS alert the other end sent, by OpenSSL's error code (SSL_AD_...); 0 when none.
int AlertOf(unsigned long e) {
  if (e == 0 || ERR_GET_LIB(e) != ERR_LIB_SSL) return 0;
  const int reason = ERR_GET_REASON(e);
  return reason > SSL_AD_REASON_OFFSET ? reason - SSL_AD_REASON_OFFSET : 0;
}

OpenSslErrors TakeOpenSslErrors() {
  OpenSslErrors out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    const bool shutdown =
        ERR_GET_LIB(e) == ERR_LIB_SSL && (ERR_GET_REASON(e) == SSL_R_SHUTDOWN_WHILE_IN_INIT ||
                                          ERR_GET_REASON(e) == SSL_R_PROTOCOL_IS_SHUTDOWN);
    if (out.first == 0 && !shutdown) out.first = e;
    if (out.alert == 0 && AlertOf(e) != 0) out.alert = e;
  }
  return out;
}

// " (OpenSSL: key values mismatch)" for an error; "" for none.
std::string Says(unsigned long e) {
  if (e == 0) return "";
  if (const char* reason = ERR_reason_error_string(e); reason != nullptr) {
    return fmt::format(" (OpenSSL: {})", reason);
  }
  std::array<char, 256> text{};
  ERR_error_string_n(e, text.data(), text.size());
  return fmt::format(" (OpenSSL: {})", text.data());
}

// What OpenSSL says of the call that just failed; its queue emptied.
std::string OpenSslSays() { return Says(TakeOpenSslErrors().first); }

// A key with a passphrase is refused rather than asked for on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

Result<BioPtr> ReadPem(const std::string& file, const char* flag) {
  auto bytes = ReadRegularFileCapped(file, kMaxTlsFileBytes, flag);
  if (!bytes) return std::move(bytes).error();
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr || BIO_write(bio, bytes->data(), static_cast<int>(bytes->size())) !=
                            static_cast<int>(bytes->size())) {
    BIO_free(bio);
    return Error::Io(fmt::format("{} {}: cannot hold it in memory{}", flag, file, OpenSslSays()));
  }
  return BioPtr(bio, &BIO_free);
}

Status CheckCaFile(const std::string& file) {
  auto bio = ReadPem(file, "--etcd-cacert");
  if (!bio) return std::move(bio).error();
  ERR_clear_error();
  STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio->get(), nullptr, NoPassphrase, nullptr);
  int certificates = 0;
  for (int i = 0; infos != nullptr && i < sk_X509_INFO_num(infos); ++i) {
    certificates += sk_X509_INFO_value(infos, i)->x509 != nullptr;
  }
  sk_X509_INFO_pop_free(infos, X509_INFO_free);
  const std::string says = OpenSslSays();
  if (certificates == 0) {
    return Error::Input(fmt::format("--etcd-cacert {}: no PEM certificate in it{}", file, says));
  }
  return OkStatus();
}

Status CheckKeyPair(const std::string& cert_file, const std::string& key_file) {
  auto cert_bio = ReadPem(cert_file, "--etcd-cert");
  if (!cert_bio) return std::move(cert_bio).error();
  ERR_clear_error();
  const X509Ptr cert(PEM_read_bio_X509(cert_bio->get(), nullptr, NoPassphrase, nullptr),
                     &X509_free);
  if (cert == nullptr) {
    return Error::Input(
        fmt::format("--etcd-cert {}: no PEM certificate in it{}", cert_file, OpenSslSays()));
  }
  auto key_bio = ReadPem(key_file, "--etcd-key");
  if (!key_bio) return std::move(key_bio).error();
  const KeyPtr key(PEM_read_bio_PrivateKey(key_bio->get(), nullptr, NoPassphrase, nullptr),
                   &EVP_PKEY_free);
  if (key == nullptr) {
    return Error::Input(
        fmt::format("--etcd-key {}: no PEM private key in it, or one with a passphrase{}", key_file,
                    OpenSslSays()));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return Error::Input(fmt::format("--etcd-key {} is not the key of --etcd-cert {}{}", key_file,
                                    cert_file, OpenSslSays()));
  }
  ERR_clear_error();
  return OkStatus();
}

// "127.0.0.1" of "https://127.0.0.1:2379".
std::string HostOf(const std::string& url) {
  const size_t start = url.find("://") == std::string::npos ? 0 : url.find("://") + 3;
  const size_t colon = url.rfind(':');
  return url.substr(
      start, colon == std::string::npos || colon < start ? std::string::npos : colon - start);
}

// The same member with `scheme` ("http" or "https") instead of its own.
std::string WithScheme(const std::string& url, const char* scheme) {
  const size_t at = url.find("://");
  return fmt::format("{}://{}", scheme, at == std::string::npos ? url : url.substr(at + 3));
}

// Why etcd's certificate was refused: OpenSSL's verification result, or (verified) the host.
std::string CertificateRefused(const std::string& url, long verify, const EtcdTls& tls) {
  const std::string openssl = X509_verify_cert_error_string(verify);
  switch (verify) {
    case X509_V_OK:  // verified, then httplib's host check failed
      return fmt::format("etcd's certificate is not for host {} (none of its names is)",
                         HostOf(url));
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_UNTRUSTED:
      if (tls.cacert_file.empty()) {
        return fmt::format(
            "etcd's certificate is not signed by a CA this system trusts: give its CA as "
            "--etcd-cacert (OpenSSL: {})",
            openssl);
      }
      return fmt::format(
          "etcd's certificate is not signed by the CA of --etcd-cacert {} (OpenSSL: {})",
          tls.cacert_file, openssl);
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return fmt::format("etcd's certificate has expired (OpenSSL: {})", openssl);
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return fmt::format("etcd's certificate is not valid yet: check the clocks (OpenSSL: {})",
                         openssl);
    default:
      return fmt::format("etcd's certificate is refused (OpenSSL: {})", openssl);
  }
}

// The alerts a server sends about the client's certificate.
bool AboutClientCertificate(int alert) {
  switch (alert) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_CERTIFICATE_REQUIRED:
      return true;
    default:
      return false;
  }
}

// The alert etcd sent (an OpenSSL error code), in words.
std::string AlertSent(unsigned long alert, const EtcdTls& tls) {
  if (!AboutClientCertificate(AlertOf(alert))) {
    return fmt::format("etcd ended the TLS handshake{}", Says(alert));
  }
  if (tls.cert_file.empty()) {
    return fmt::format("etcd asks for a client certificate: give --etcd-cert and --etcd-key{}",
                       Says(alert));
  }
  return fmt::format("etcd refuses this client's certificate, --etcd-cert {}{}", tls.cert_file,
                     Says(alert));
}

// A socket connected to `url`'s host and port within `timeout_s`, blocking, each read and
// write bounded by `timeout_s`; -1 when there is none.
int Connect(const std::string& url, double timeout_s) {
  std::string host = HostOf(url);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = url.substr(url.rfind(':') + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return -1;
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int timeout_ms = static_cast<int>(timeout_s * 1e3);
  bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  if (fd >= 0 && !connected && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof error;
    connected = poll(&p, 1, timeout_ms) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
  }
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const timeval tv{static_cast<time_t>(timeout_ms / 1000),
                   static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// A TLS handshake of our own with `url`'s member (its certificate not checked; with `tls`'s
// client certificate when there is one) that sends nothing after it: etcd's answer to the
// handshake alone. (httplib writes its request at once; etcd, closing the connection with that
// request unread, resets it, and the alert it sent before may be lost.)
struct Handshake {
  bool completed = false;   // as far as this side knows (TLS 1.3 refuses a client after it)
  unsigned long alert = 0;  // the alert etcd sent (OpenSSL's error code); 0: none
};

// `wait_s`: how long to wait for an alert after a completed handshake (0: not at all).
Handshake ProbeHandshake(const std::string& url, const EtcdTls& tls, double timeout_s,
                         double wait_s) {
  Handshake out;
  const int fd = Connect(url, timeout_s);
  if (fd < 0) return out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = ctx == nullptr ? nullptr : SSL_new(ctx);
  if (ssl != nullptr) {
    ScopedSigpipeBlock no_sigpipe;
    ERR_clear_error();
    if (!tls.cert_file.empty()) {
      SSL_set_default_passwd_cb(ssl, NoPassphrase);
      SSL_use_certificate_file(ssl, tls.cert_file.c_str(), SSL_FILETYPE_PEM);
      SSL_use_PrivateKey_file(ssl, tls.key_file.c_str(), SSL_FILETYPE_PEM);
    }
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      out.completed = true;
      if (wait_s > 0) {
        const int wait_ms = static_cast<int>(wait_s * 1e3);
        const timeval tv{static_cast<time_t>(wait_ms / 1000),
                         static_cast<suseconds_t>((wait_ms % 1000) * 1000)};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char byte = 0;
        SSL_read(ssl, &byte, 1);
      }
    }
    out.alert = TakeOpenSslErrors().alert;
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return out;
}

void ConfigureProbe(httplib::Client& probe, double timeout_s) {
  const auto s = static_cast<time_t>(timeout_s);
  const auto us = static_cast<time_t>((timeout_s - static_cast<double>(s)) * 1e6);
  probe.set_connection_timeout(s, us);
  probe.set_read_timeout(s, us);
  probe.set_write_timeout(s, us);
}

// Whether `http_url` answers a plain HTTP request.
bool SpeaksHttp(const std::string& http_url, double timeout_s) {
  httplib::Client probe(http_url);
  ConfigureProbe(probe, timeout_s);
  ScopedSigpipeBlock no_sigpipe;
  const bool answered = static_cast<bool>(probe.Get(kProbePath));
  ERR_clear_error();
  return answered;
}

}  // namespace

Status CheckTlsFiles(const EtcdTls& tls) {
  if (!tls.cacert_file.empty()) {
    if (Status st = CheckCaFile(tls.cacert_file); !st) return st;
  }
  if (!tls.cert_file.empty() && !tls.key_file.empty()) {
    if (Status st = CheckKeyPair(tls.cert_file, tls.key_file); !st) return st;
  }
  return OkStatus();
}

void ClearTlsErrors() { ERR_clear_error(); }

std::optional<std::string> NameTlsFailure(const std::string& url, const httplib::Client& client,
                                          httplib::Error error, double elapsed_s, double timeout_s,
                                          const EtcdTls& tls) {
  const OpenSslErrors errors = TakeOpenSslErrors();
  // The other end closed the connection, as a member that refuses what it was sent does.
  const bool closed = (error == httplib::Error::Read || error == httplib::Error::Write) &&
                      elapsed_s < kQuickShareOfTimeout * timeout_s;
  if (!url.starts_with("https://")) {
    // etcd closes a plain connection to its TLS port at once, without a word.
    if (closed) {
      const Handshake h = ProbeHandshake(WithScheme(url, "https"), {}, timeout_s, 0.0);
      if (h.completed || h.alert != 0) {
        return "it speaks TLS, not plain HTTP: use https:// or etcds:// endpoints (with "
               "--etcd-cacert)";
      }
    }
    return std::nullopt;
  }
  if (!client.is_valid()) {
    return fmt::format("no TLS client from --etcd-cert {} and --etcd-key {}", tls.cert_file,
                       tls.key_file);
  }
  if (error == httplib::Error::SSLLoadingCerts) {
    return fmt::format("cannot load the CAs of --etcd-cacert {}{}", tls.cacert_file,
                       Says(errors.first));
  }
  if (error == httplib::Error::SSLServerVerification) {
    return CertificateRefused(url, client.get_openssl_verify_result(), tls);
  }
  // A refusal of this client's certificate comes in the handshake (TLS 1.2), or after it
  // (TLS 1.3: as the request is written, or at the first read).
  if (errors.alert != 0) return AlertSent(errors.alert, tls);
  if (closed) {
    const Handshake h = ProbeHandshake(url, tls, timeout_s, std::min(timeout_s, kAlertWaitS));
    if (h.alert != 0) return AlertSent(h.alert, tls);
  }
  if (error != httplib::Error::SSLConnection) return std::nullopt;
  if (errors.first == 0 && elapsed_s >= kQuickShareOfTimeout * timeout_s)
    return fmt::format("no TLS handshake within {} s", timeout_s);
  // etcd closes a TLS connection to its plain port at once, at the first bytes of the handshake.
  if (SpeaksHttp(WithScheme(url, "http"), timeout_s)) {
    return "it speaks plain HTTP, not TLS: use http:// or etcd:// endpoints";
  }
  return fmt::format("the TLS handshake failed{}", Says(errors.first));
}

namespace {

std::string DescribeHttpError(httplib::Error e, double timeout_s) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return fmt::format("cannot connect within {} s", timeout_s);
    case httplib::Error::Read:
      return fmt::format("no answer within {} s, or the connection was lost", timeout_s);
    case httplib::Error::Write:
      return "the connection was lost while sending";
    default:
      return fmt::format("HTTP client error {}", httplib::to_string(e));
  }
}

}  // namespace

bool NotSent(httplib::Error e) {
  return e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout ||
         e == httplib::Error::BindIPAddress || e == httplib::Error::Write ||
         e == httplib::Error::SSLConnection || e == httplib::Error::SSLLoadingCerts ||
         e == httplib::Error::SSLServerVerification || e == httplib::Error::Success;
}

std::string DescribeFailure(const std::string& url, const httplib::Client& client, httplib::Error e,
                            double elapsed_s, double timeout_s, double read_timeout_s,
                            const EtcdTls& tls) {
  std::optional<std::string> tls_cause = NameTlsFailure(url, client, e, elapsed_s, timeout_s, tls);
  return tls_cause ? *std::move(tls_cause) : DescribeHttpError(e, read_timeout_s);
}

}  // namespace headroom::etcd

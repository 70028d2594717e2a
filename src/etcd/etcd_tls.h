// TLS to etcd: its files checked when they are loaded, and each failure of a request named in
// one line (TLS's cause, else the HTTP client's), with OpenSSL's own reason beside ours. The one
// file of etcd/ that calls OpenSSL; etcd_store.cc asks it after a request failed. Where the failure
// alone cannot tell the cause from a lost connection, it asks the member once more on a connection
// of its own (NameTlsFailure), so a failure may take up to one more timeout to report.
//
// Thread-safe: OpenSSL's error queue, which it reads, is per thread.
#pragma once

#include <optional>
#include <string>

#include "common/error.h"

namespace httplib {
class Client;
enum class Error;
}  // namespace httplib

namespace headroom::etcd {

// TLS to etcd, for https:// (or etcds://) endpoints: the CA that signed etcd's certificate
// (empty: the system's CAs), and this client's certificate and key, for an etcd started with
// --client-cert-auth (both or neither). etcd's certificate is verified, its host name too.
struct EtcdTls {
  std::string cacert_file;  // --etcd-cacert
  std::string cert_file;    // --etcd-cert
  std::string key_file;     // --etcd-key
};

// A bound on each TLS file read: a CA bundle of the whole web is ~220 KB.
inline constexpr size_t kMaxTlsFileBytes = size_t{1} << 20;

// The files' contents, without connecting: --etcd-cacert holds at least one PEM certificate,
// --etcd-cert one, --etcd-key a PEM private key without a passphrase (one would be asked for on
// the terminal), and the key is the certificate's (OpenSSL's X509_check_private_key). Else an
// Error::Input naming the file(s), the flag(s) and OpenSSL's reason. REQUIRES: the files exist
// and are regular (CheckEtcdAccess checks that first).
Status CheckTlsFiles(const EtcdTls& tls);

// Empties this thread's OpenSSL error queue: call before a request, so that what NameTlsFailure
// reads after it is that request's.
void ClearTlsErrors();

// Why the request that `client` (for `url`, "http://..." or "https://...") failed with `error`
// after `elapsed_s` (`timeout_s`: its connection's timeout), when TLS says it: etcd's
// certificate refused (not signed by --etcd-cacert's CA, expired, not yet valid, not for the
// host name), this client's certificate refused or missing, the CAs not loaded, the client not
// set up from --etcd-cert and --etcd-key, no TLS handshake within the timeout, or the wrong
// scheme (plain HTTP spoken to a TLS port, TLS to a plain one). A connection the member closed
// at once is asked about again, within `timeout_s`: a handshake of its own that sends nothing
// after it (the member's alert, or whether it speaks TLS at all), or a plain HTTP request.
// nullopt: not TLS's failure, as far as it can tell. Reads and empties this thread's OpenSSL
// error queue (ClearTlsErrors before the request).
std::optional<std::string> NameTlsFailure(const std::string& url, const httplib::Client& client,
                                          httplib::Error error, double elapsed_s, double timeout_s,
                                          const EtcdTls& tls);

// Failures after which the member cannot have received the whole request: no connection, no
// TLS over it (Success: a TLS client that could not be set up), or not all of it written.
bool NotSent(httplib::Error e);

// What went wrong with a request, in words: TLS's cause when it has one (NameTlsFailure;
// `timeout_s` bounds connecting and the handshake), else httplib's (`read_timeout_s` bounds the
// wait for bytes).
std::string DescribeFailure(const std::string& url, const httplib::Client& client, httplib::Error e,
                            double elapsed_s, double timeout_s, double read_timeout_s,
                            const EtcdTls& tls);

}  // namespace headroom::etcd

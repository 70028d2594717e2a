// The flags of every command that talks to etcd, the same everywhere (docs/SITE.md, "etcd with
// TLS and auth"): --etcd-cacert, --etcd-cert, --etcd-key (https:// or etcds:// endpoints),
// --etcd-user, --etcd-password-file, and how leases are renewed (--etcd-keepalive). Header-only:
// `headroom` and `headroom-diloco` both take them.
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/read_file.h"
#include "etcd/etcd_store.h"

namespace headroom::cli {

struct EtcdOptions {
  std::string cacert, cert, key;
  std::string user, password_file;
  std::string keepalive = etcd::EtcdKeepAliveName(etcd::kDefaultEtcdKeepAlive);

  etcd::EtcdKeepAlive KeepAlive() const {
    auto k = etcd::ParseEtcdKeepAlive(keepalive);
    return k ? *k : etcd::kDefaultEtcdKeepAlive;  // (CLI::IsMember checked it)
  }
};

inline void AddEtcdOptions(CLI::App& app, EtcdOptions* o) {
  app.add_option("--etcd-cacert", o->cacert,
                 "CA certificate that signed etcd's (https:// endpoints; default: the system's)");
  app.add_option(
      "--etcd-cert", o->cert,
      "This client's certificate, for an etcd with --client-cert-auth (with --etcd-key)");
  app.add_option("--etcd-key", o->key, "This client's private key (with --etcd-cert)");
  app.add_option("--etcd-user", o->user, "etcd user (its v3 auth; with --etcd-password-file)");
  app.add_option("--etcd-password-file", o->password_file,
                 "File holding the etcd user's password on its first line (chmod 600)");
  app.add_option("--etcd-keepalive", o->keepalive,
                 "How leases are renewed: grpc (one long-lived stream to etcd, each renewal a "
                 "message; by the gateway for a minute when no stream can be opened) or http "
                 "(one request to etcd's JSON gateway per renewal)")
      ->check(CLI::IsMember({"grpc", "http"}))
      ->capture_default_str();
}

// "--etcd-key F is readable by other users (chmod 600 it)": one for each of the secrets,
// --etcd-password-file and --etcd-key, that users other than its owner may read (the rule of
// --token-file, cli/token_options.h).
inline std::vector<std::string> EtcdSecretWarnings(const EtcdOptions& o) {
  std::vector<std::string> warnings;
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string&>{"--etcd-password-file", o.password_file},
        std::pair<const char*, const std::string&>{"--etcd-key", o.key}}) {
    if (!file.empty() && ReadableByOthers(file)) {
      warnings.push_back(
          fmt::format("{} {} is readable by other users (chmod 600 it)", flag, file));
    }
  }
  return warnings;
}

// Why the read of `prefix` at start failed, in one line, by the error's kind (never its
// message): no answer (kUnavailable: no member answered, or each said it timed out -- a cluster
// without quorum; kOutcomeUnknown) names the `waited_s` and quorum, not credentials; anything
// else is etcd refusing (auth on and no user, a user without the permission: etcd's
// PERMISSION_DENIED is an I/O error here, its UNAUTHENTICATED kUnauthenticated), with the flags
// when `has_user` is false.
inline Error EtcdProbeError(std::string_view prefix, const Error& e, double waited_s,
                            bool has_user) {
  if (e.kind() == ErrorKind::kUnavailable || e.kind() == ErrorKind::kOutcomeUnknown) {
    return Error::Io(fmt::format(
        "etcd did not answer a read of {} within {:.1f} s (no quorum? a majority of its members "
        "down or cut off from each other): {}",
        prefix, waited_s, e.message()));
  }
  return Error::Io(fmt::format("etcd refuses to read {}: {}{}", prefix, e.message(),
                               has_user ? "" : " (--etcd-user and --etcd-password-file)"));
}

// Opens etcd at `endpoints` with the options; a usage error names `flag` (the endpoints' own).
// With `probe_prefix`, reads it once: an etcd that refuses (auth on and no user, or a user
// without the permission) or does not answer (no quorum) is an error at start, not a replica
// that waits forever.
inline Result<std::unique_ptr<etcd::EtcdStore>> OpenEtcd(const std::string& endpoints,
                                                         std::string_view flag, double timeout_s,
                                                         const EtcdOptions& o,
                                                         const std::string& probe_prefix = "") {
  auto credentials = etcd::ReadEtcdCredentials(o.user, o.password_file);
  if (!credentials) return std::move(credentials).error();
  const etcd::EtcdTls tls{o.cacert, o.cert, o.key};
  auto store = etcd::EtcdStore::Open(endpoints, timeout_s, *credentials, tls, o.KeepAlive());
  if (!store) {
    const Error& e = store.error();
    if (e.kind() == ErrorKind::kUsage)
      return Error::Usage(fmt::format("{}: {}", flag, e.message()));
    if (e.kind() == ErrorKind::kInput) return e;
    return Error::Io(fmt::format("cannot reach etcd at start: {}", e.message()));
  }
  if (!probe_prefix.empty()) {
    const auto sent = std::chrono::steady_clock::now();
    if (auto r = (*store)->Get(probe_prefix, /*prefix=*/true); !r) {
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - sent;
      return EtcdProbeError(probe_prefix, r.error(), waited.count(), !o.user.empty());
    }
  }
  return store;
}

}  // namespace headroom::cli

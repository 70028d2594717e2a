// Secrets passed as systemd credentials (LoadCredential=; docs/INSTALL.md, "Secrets"): the
// service manager copies a root-owned file into $CREDENTIALS_DIRECTORY, readable by the service
// alone (a DynamicUser= service cannot read the root-owned original). A secret the command line
// and the configuration name no file for is taken from the credential of its name there:
// `token` (--token-file), `etcd-password` (--etcd-password-file, with --etcd-user) and `etcd-key`
// (--etcd-key, with --etcd-cert). What is named explicitly always wins.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/token_options.h"
#include "cli_main/etcd_options.h"

namespace headroom::cli {

// $CREDENTIALS_DIRECTORY/<id> when the service manager passed a regular file under that name;
// "" otherwise (no directory, no such credential, or `id` not a plain name).
std::string CredentialFile(std::string_view id);

// The secrets left unnamed, filled from the credentials present; one line to log for each taken
// ("--token-file from the systemd credential 'token' (...)").
std::vector<std::string> TakeCredentials(TokenArgs* token, EtcdOptions* etcd);
// A domain's parent etcd (headroom coordinator --parent-etcd): --parent-etcd-password-file
// from "parent-etcd-password", --parent-etcd-key from "parent-etcd-key", on the same terms.
std::vector<std::string> TakeParentCredentials(EtcdOptions* parent);

}  // namespace headroom::cli

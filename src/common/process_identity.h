// Who holds a registration: this process, named so that a later process on the same machine can
// tell whether it is still running (docs/SITE.md, "An agent restarted").
//
// The identity is "host=<hostname> boot=<boot id> pidns=<pid namespace inode> pid=<pid>
// start=<start time in clock ticks since boot>". A process is known gone only where the host,
// the boot and the pid namespace are this process's own and no process with that pid and start
// time runs; anywhere else (another machine, container or boot) nothing can be told, and
// IdentityGoneHere says no.
#pragma once

#include <string>
#include <string_view>

namespace headroom {

// This process's identity; "" where /proc cannot say it (then nothing reclaims its place).
std::string ThisProcessIdentity();

// True only when `identity` names a process of this host, boot and pid namespace that no
// longer runs. Malformed identities are never gone.
bool IdentityGoneHere(std::string_view identity);

// The identity of process `pid` as seen from this one ("" when it does not run): for tests.
std::string ProcessIdentity(long pid);

}  // namespace headroom

// The routes of one API, and the checks every route shares, in this order: the Host (403,
// policy.h), an origin-form target (400), the path (404, naming the paths served), the method
// (405 with Allow; HEAD wherever GET), the token and the content type by the route's access
// (401, 415). Then the route's function, with the query string (empty when none).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "net/http.h"
#include "net/policy.h"

namespace headroom::net {

class Router {
 public:
  using Fn = std::function<Response(const Request& request, std::string_view query)>;
  enum class Access {
    kPage,  // GET and HEAD, open even with token_on_reads: a static page that holds no data
    kRead,  // GET and HEAD, the token with token_on_reads
    // GET and HEAD, the token whenever one is set: a read that costs the daemon (a long
    // history), which a token for writes keeps to those who hold it.
    kCostlyRead,
    kWrite,  // POST, the token when one is set, and a JSON body
  };

  // `daemon` names the daemon in the 403 and the 404.
  Router(AccessPolicy policy, std::string daemon);

  // REQUIRES: `path` starts with '/' and is not routed yet.
  void Add(std::string path, Access access, Fn fn);
  // Constant once routes are added: thread-safe as far as the route functions are.
  Response Handle(const Request& request) const;
  const AccessPolicy& policy() const { return policy_; }

 private:
  struct Route {
    std::string path;
    Access access;
    Fn fn;
  };
  const AccessPolicy policy_;
  const std::string daemon_;
  std::vector<Route> routes_;
  std::string paths_;  // "/, /v1/status, ...", for the 404
};

}  // namespace headroom::net

// A test suite's one etcd (tests/support/etcd_cluster.h): started once for the suite, stopped
// after it, each test skipped where there is no etcd binary and failed where it did not start.
// Suites derive from it and reach the cluster as cluster_.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "support/etcd_cluster.h"

namespace headroom::etcd_test {

class OneEtcdPerSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (EtcdCluster::Available()) cluster_ = EtcdCluster::Start(1, &why_);
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (!EtcdCluster::Available()) GTEST_SKIP() << "no " << kEtcdBinary;
    ASSERT_TRUE(cluster_) << why_;
  }

  static inline std::optional<EtcdCluster> cluster_;
  static inline std::string why_;
};

}  // namespace headroom::etcd_test

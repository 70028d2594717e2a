// A small multilayer perceptron: tanh hidden layers, a linear output layer. Eigen, doubles.
//
// Batches are column-major: one sample per column. Backward is hand-derived and checked against
// finite differences (tests/rl/mlp_test.cc).
#pragma once

#include <Eigen/Dense>
#include <random>
#include <vector>

namespace headroom::rl {

class Mlp {
 public:
  Mlp() = default;
  // sizes = {inputs, hidden..., outputs}. REQUIRES: at least two sizes, all > 0.
  explicit Mlp(std::vector<int> sizes);

  // Orthogonal weights (QR of a Gaussian matrix) scaled by `hidden_gain` for hidden layers and
  // `output_gain` for the last; zero biases.
  void InitOrthogonal(std::mt19937_64& rng, double hidden_gain, double output_gain);

  struct Cache {
    std::vector<Eigen::MatrixXd> a;  // a[0] = input, a[l] = output of layer l
  };
  // Y = cache.a.back(), outputs x n.
  void Forward(const Eigen::MatrixXd& x, Cache* cache) const;
  // One sample, no cache; `scratch` avoids allocation after the first call.
  void ForwardOne(const Eigen::VectorXd& x, Eigen::VectorXd* y,
                  std::vector<Eigen::VectorXd>* scratch) const;

  // Gradients of a loss whose derivative with respect to the outputs is dy (outputs x n), added
  // into `grad` (laid out like Parameters()).
  void Backward(const Cache& cache, const Eigen::MatrixXd& dy, Eigen::VectorXd* grad) const;

  int inputs() const { return sizes_.front(); }
  int outputs() const { return sizes_.back(); }
  const std::vector<int>& sizes() const { return sizes_; }
  Eigen::Index ParameterCount() const;
  // All weights then biases, layer by layer: W0 (row-major rows of out x in), b0, W1, b1, ...
  Eigen::VectorXd Parameters() const;
  void SetParameters(const Eigen::VectorXd& p);

  std::vector<Eigen::MatrixXd>& weights() { return w_; }
  std::vector<Eigen::VectorXd>& biases() { return b_; }
  const std::vector<Eigen::MatrixXd>& weights() const { return w_; }
  const std::vector<Eigen::VectorXd>& biases() const { return b_; }

 private:
  std::vector<int> sizes_;
  std::vector<Eigen::MatrixXd> w_;  // out x in
  std::vector<Eigen::VectorXd> b_;
};

}  // namespace headroom::rl

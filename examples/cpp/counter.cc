// The C++ API in one program: a remote function, an actor, refs as
// arguments. Build with the project (bash scripts/setup.sh builds it as
// build/<tag>/examples/cpp/phalanx_cpp_counter) and run it: it starts an
// embedded cluster, and the cluster starts this same program as its workers.
#include <iostream>

#include <phalanx/api.h>

int Plus(int a, int b) { return a + b; }

int Fails(int x) {
  if (x < 0) throw std::invalid_argument("negative input");
  return x;
}

PHALANX_REMOTE(Plus, Fails);

class Counter {
 public:
  explicit Counter(int start) : total_(start) {}
  static Counter* Create(int start) { return new Counter(start); }
  int Add(int x) {
    total_ += x;
    return total_;
  }

 private:
  int total_;
};

PHALANX_REMOTE(Counter::Create, &Counter::Add);

int main() {
  phalanx::Init();
  auto sum = phalanx::Task(Plus).Remote(1, 2);
  auto counter = phalanx::Actor(Counter::Create).SetResources({{"CPU", 1}}).Remote(0);
  auto r = counter.Task(&Counter::Add).Remote(sum);  // refs as arguments
  std::cout << "1 + 2 = " << *phalanx::Get(sum) << "\n";
  std::cout << "counter after adding it: " << *phalanx::Get(r) << "\n";
  std::cout << "and 10 more: " << *phalanx::Get(counter.Task(&Counter::Add).Remote(10)) << "\n";
  try {
    phalanx::Get(phalanx::Task(Fails).Remote(-1));
  } catch (const phalanx::RemoteError& e) {
    std::cout << "a remote exception arrives as RemoteError: " << e.what() << "\n";
  }
  phalanx::Shutdown();
  return 0;
}

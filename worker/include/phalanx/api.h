// The phalanx C++ API.
//
//   #include <phalanx/api.h>
//   int Plus(int a, int b) { return a + b; }
//   PHALANX_REMOTE(Plus);
//   class Counter { public: static Counter* Create(int start); int Add(int x); };
//   PHALANX_REMOTE(Counter::Create, &Counter::Add);
//
//   int main() {
//     phalanx::Init();                                   // embedded local cluster, or Init("HOST:PORT")
//     auto sum = phalanx::Task(Plus).Remote(1, 2);       // ObjectRef<int>
//     auto counter = phalanx::Actor(Counter::Create).SetResources({{"CPU", 1}}).Remote(0);
//     auto r = counter.Task(&Counter::Add).Remote(sum);  // refs as arguments
//     std::cout << *phalanx::Get(r) << "\n";
//     phalanx::Shutdown();
//   }
//
// Functions and methods are registered by name with PHALANX_REMOTE; workers
// are this same program started again in worker mode (Init() never returns
// there), so the registrations match. Arguments and results are serialized
// with msgpack (any type msgpack-c can pack). An exception thrown by a remote
// function reaches Get as phalanx::RemoteError with its message. Thread-safe
// like the core worker library under it.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <msgpack.hpp>

namespace phalanx {

class RemoteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace internal {

// A value crossing processes: first byte 0 = msgpack value, 1 = error text.
inline std::string PackValue(const msgpack::sbuffer& b) { return std::string(1, '\0') + std::string(b.data(), b.size()); }
inline std::string PackError(const std::string& what) { return std::string(1, '\1') + what; }

template <typename T>
std::string Pack(const T& v) {
  msgpack::sbuffer b;
  msgpack::pack(b, v);
  return PackValue(b);
}

template <typename T>
T Unpack(const std::string& bytes) {
  if (bytes.empty()) throw RemoteError("empty value");
  if (bytes[0] == '\1') throw RemoteError(bytes.substr(1));
  msgpack::object_handle oh = msgpack::unpack(bytes.data() + 1, bytes.size() - 1);
  return oh.get().as<T>();
}

// Invokers turn packed arguments into a call and the result into packed bytes.
using Invoker = std::function<std::string(void* self, const std::vector<std::string>& args)>;
using Factory = std::function<std::shared_ptr<void>(const std::vector<std::string>& args)>;

struct Registry {
  std::map<std::string, Invoker> invokers;      // name -> call
  std::map<std::string, Factory> factories;     // name -> actor creation
  std::map<std::string, std::string> names;     // pointer bytes -> name
  static Registry& Get() {
    static Registry* r = new Registry();
    return *r;
  }
};

template <typename P>
std::string PointerKey(P p) {
  return std::string(reinterpret_cast<const char*>(&p), sizeof(p));
}

template <typename Tuple, size_t... I>
Tuple UnpackArgs(const std::vector<std::string>& args, std::index_sequence<I...>) {
  if (args.size() != sizeof...(I)) {
    throw RemoteError("expected " + std::to_string(sizeof...(I)) + " arguments, got " + std::to_string(args.size()));
  }
  return Tuple{Unpack<std::decay_t<std::tuple_element_t<I, Tuple>>>(args[I])...};
}

template <typename R, typename... A>
void RegisterOne(const std::string& name, R (*f)(A...)) {
  auto& reg = Registry::Get();
  reg.names[PointerKey(f)] = name;
  using Args = std::tuple<std::decay_t<A>...>;
  if constexpr (std::is_pointer_v<R> && std::is_class_v<std::remove_pointer_t<R>>) {
    reg.factories[name] = [f](const std::vector<std::string>& args) -> std::shared_ptr<void> {
      auto t = UnpackArgs<Args>(args, std::index_sequence_for<A...>{});
      return std::shared_ptr<std::remove_pointer_t<R>>(std::apply(f, std::move(t)));
    };
  } else {
    reg.invokers[name] = [f](void*, const std::vector<std::string>& args) -> std::string {
      auto t = UnpackArgs<Args>(args, std::index_sequence_for<A...>{});
      if constexpr (std::is_void_v<R>) {
        std::apply(f, std::move(t));
        return Pack(msgpack::type::nil_t());
      } else {
        return Pack(std::apply(f, std::move(t)));
      }
    };
  }
}

template <typename R, typename C, typename... A>
void RegisterOne(const std::string& name, R (C::*m)(A...)) {
  auto& reg = Registry::Get();
  reg.names[PointerKey(m)] = name;
  using Args = std::tuple<std::decay_t<A>...>;
  reg.invokers[name] = [m](void* self, const std::vector<std::string>& args) -> std::string {
    auto t = UnpackArgs<Args>(args, std::index_sequence_for<A...>{});
    C* obj = static_cast<C*>(self);
    auto call = [obj, m](auto&&... a) { return (obj->*m)(std::forward<decltype(a)>(a)...); };
    if constexpr (std::is_void_v<R>) {
      std::apply(call, std::move(t));
      return Pack(msgpack::type::nil_t());
    } else {
      return Pack(std::apply(call, std::move(t)));
    }
  };
}

std::vector<std::string> SplitNames(const char* names);
// The C++ worker loop (phalanx-cpp-worker and programs in worker mode); never returns.
[[noreturn]] void RunWorkerLoop();

struct Registrar {
  template <typename... F>
  Registrar(const char* names, F... fs) {
    auto n = SplitNames(names);
    size_t i = 0;
    (RegisterOne(n[i++], fs), ...);
  }
};

template <typename P>
const std::string& NameOf(P p) {
  auto& names = Registry::Get().names;
  auto it = names.find(PointerKey(p));
  if (it == names.end()) throw std::invalid_argument("function not registered with PHALANX_REMOTE");
  return it->second;
}

// One argument: inline packed bytes, or a ref's object id.
struct Arg {
  std::string object_id;
  std::string data;
};

// Submits a task or method call; returns the first return object id.
std::string Submit(const std::string& name, const std::vector<Arg>& args, const std::map<std::string, double>& res,
                   int kind, const std::string& actor_id);
std::string GetBytes(const std::string& object_id, int64_t timeout_ms);
void RemoveRef(const std::string& id);

}  // namespace internal

// A reference to a value of type T somewhere in the cluster.
template <typename T>
class ObjectRef {
 public:
  ObjectRef() = default;
  explicit ObjectRef(std::string id) : id_(std::make_shared<Holder>(std::move(id))) {}
  const std::string& id() const { return id_->id; }

 private:
  struct Holder {  // one local reference for all copies
    explicit Holder(std::string i) : id(std::move(i)) {}
    ~Holder() { internal::RemoveRef(id); }
    std::string id;
  };
  std::shared_ptr<Holder> id_;
};

namespace internal {
template <typename T>
Arg ToArg(const T& v) {
  return Arg{"", Pack(v)};
}
template <typename T>
Arg ToArg(const ObjectRef<T>& r) {
  return Arg{r.id(), ""};
}
}  // namespace internal

// Connects to a cluster ("HOST:PORT" of its GCS), or with no address starts
// an embedded one (redis-server + a raylet). In a worker process it runs
// the worker loop and does not return.
void Init(const std::string& address = "");

struct InitOptions {
  std::string address;                      // "" = an embedded cluster
  // Shared libraries holding the PHALANX_REMOTE functions: when set, the
  // embedded cluster's workers are the generic phalanx-cpp-worker loading
  // these instead of this program started again. Only with an embedded
  // cluster (address ""): a running cluster's nodes run the C++ workers they
  // were configured with (`phalanx start --cpp-worker-libs`).
  std::vector<std::string> code_libraries;
};
void Init(const InitOptions& options);
void Shutdown();

template <typename T>
std::shared_ptr<T> Get(const ObjectRef<T>& ref, int64_t timeout_ms = -1) {
  return std::make_shared<T>(internal::Unpack<T>(internal::GetBytes(ref.id(), timeout_ms)));
}

template <typename F>
class TaskCaller {
 public:
  explicit TaskCaller(F f) : f_(f) {}
  TaskCaller& SetResources(std::map<std::string, double> r) {
    res_ = std::move(r);
    return *this;
  }
  template <typename... A>
  auto Remote(const A&... args) {
    using R = decltype(std::apply(f_, std::declval<std::tuple<typename Plain<A>::type...>>()));
    std::vector<internal::Arg> packed{internal::ToArg(args)...};
    return ObjectRef<R>(internal::Submit(internal::NameOf(f_), packed, res_, 0, ""));
  }

 private:
  template <typename A>
  struct Plain {
    using type = A;
  };
  template <typename U>
  struct Plain<ObjectRef<U>> {
    using type = U;
  };
  F f_;
  std::map<std::string, double> res_;
};

template <typename T>
class ActorHandle {
 public:
  explicit ActorHandle(std::string actor_id) : actor_id_(std::move(actor_id)) {}
  template <typename R, typename... M>
  class Method {
   public:
    Method(std::string actor, R (T::*m)(M...)) : actor_(std::move(actor)), m_(m) {}
    template <typename... A>
    ObjectRef<R> Remote(const A&... args) {
      std::vector<internal::Arg> packed{internal::ToArg(args)...};
      return ObjectRef<R>(internal::Submit(internal::NameOf(m_), packed, {}, 2, actor_));
    }

   private:
    std::string actor_;
    R (T::*m_)(M...);
  };
  template <typename R, typename... M>
  Method<R, M...> Task(R (T::*m)(M...)) const {
    return Method<R, M...>(actor_id_, m);
  }
  const std::string& id() const { return actor_id_; }

 private:
  std::string actor_id_;
};

template <typename T, typename... A>
class ActorCreator {
 public:
  explicit ActorCreator(T* (*f)(A...)) : f_(f) {}
  ActorCreator& SetResources(std::map<std::string, double> r) {
    res_ = std::move(r);
    return *this;
  }
  template <typename... B>
  ActorHandle<T> Remote(const B&... args) {
    std::vector<internal::Arg> packed{internal::ToArg(args)...};
    std::string ready = internal::Submit(internal::NameOf(f_), packed, res_, 1, "");
    return ActorHandle<T>(ready.substr(0, 16));  // the actor id is its creation task id
  }

 private:
  T* (*f_)(A...);
  std::map<std::string, double> res_;
};

template <typename F>
TaskCaller<F> Task(F f) {
  return TaskCaller<F>(f);
}

template <typename T, typename... A>
ActorCreator<T, A...> Actor(T* (*f)(A...)) {
  return ActorCreator<T, A...>(f);
}

}  // namespace phalanx

#define PHALANX_API_CONCAT_(a, b) a##b
#define PHALANX_API_CONCAT(a, b) PHALANX_API_CONCAT_(a, b)
#define PHALANX_REMOTE(...) \
  static ::phalanx::internal::Registrar PHALANX_API_CONCAT(phalanx_registrar_, __LINE__)(#__VA_ARGS__, __VA_ARGS__)

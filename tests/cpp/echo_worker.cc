// A C++ worker for the raylet tests: it registers like a Python worker and
// runs three built-in "functions", chosen by the task's function name:
//   echo         returns its arguments' bytes concatenated
//   sleep_ms     sleeps for the number of ms in its first argument, returns "slept"
//   crash_once   exits the process if the file named by its argument does not
//                exist yet (creating it first), else returns "survived"
//   crash        exits the process
#include <fstream>
#include <thread>
#include <unistd.h>

#include "core/ids.h"
#include "worker/core_worker.h"

using namespace phalanx;

int main() {
  CoreWorkerOptions o;
  o.socket_path = std::getenv("PHALANX_RAYLET_SOCKET");
  o.is_worker = true;
  o.worker_token = std::getenv("PHALANX_WORKER_TOKEN");
  o.language = "cpp";
  auto cw = CoreWorker::Connect(o);
  if (!cw.ok()) return 3;
  CoreWorker& core = *cw.value();
  while (true) {
    auto t = core.NextTask(-1);
    if (!t.ok()) return 0;
    const rpc::TaskSpec& s = t.value().spec();
    std::string joined;
    int ref = 0;
    for (const auto& a : s.args()) {
      if (a.object_id().empty()) {
        joined += a.data();
      } else {
        const rpc::ObjectValue& v = t.value().ref_args(ref++);
        if (v.state() == rpc::OBJ_INLINE) joined += v.data();
        if (v.state() == rpc::OBJ_IN_STORE) {
          joined.append(reinterpret_cast<const char*>(core.store_base() + v.offset()), v.size());
          core.Release(a.object_id());
        }
      }
    }
    std::string out = joined;
    if (s.function_name() == "sleep_ms") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(joined)));
      out = "slept";
    } else if (s.function_name() == "crash") {
      ::_exit(1);
    } else if (s.function_name() == "crash_once") {
      if (::access(joined.c_str(), F_OK) != 0) {
        std::ofstream(joined) << "x";
        ::_exit(1);
      }
      out = "survived";
    }
    rpc::TaskDone d;
    d.set_task_id(s.task_id());
    for (int i = 1; i <= s.num_returns(); ++i) {
      auto* r = d.add_returns();
      r->set_object_id(MakeObjectId(s.task_id(), i));
      r->set_data(out);
    }
    if (!core.TaskDone(d).ok()) return 0;
  }
}

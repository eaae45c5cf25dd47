// TaskCall: what next_task hands the worker loop (python/phalanx/_private/worker.py),
// a struct sequence (as os.stat_result): fields by name, and still a tuple,
// so unpacking it is as fast as the plain tuple it replaces.
#include "python/bindings/py_core.h"

namespace phalanx::py {

namespace {
PyStructSequence_Field kFields[] = {
    {"task_id", "the task's id (bytes)"},
    {"function_id", "the function's (or the actor class's) id (bytes)"},
    {"name", "the function's qualified name (an actor's call: Class.method)"},
    {"args", "[(keyword, kind, payload)]: each argument as get() gives a value ('' keyword: positional)"},
    {"num_returns", "how many returns the caller expects"},
    {"attempt", "0 the first time; a retry's or an actor restart's count after"},
    {"kind", "0 a task, 1 an actor's creation, 2 an actor's method call (TaskCall.TASK, ...)"},
    {"actor_id", "the actor's id (bytes; b'' for a task)"},
    {"method_name", "an actor call's method"},
    {"gpu_ids", "the GPUs it may use"},
    {"job_id", "the job it works for (bytes)"},
    {"namespace", "that job's namespace ('' : the job's anonymous one)"},
    {"num_cpus", "the CPUs it asked for"},
    {"resources", "the other resources it asked for (a dict), or None"},
    {"generator", "0, or how it yields: 1 dynamic, 2 streaming"},
    {"backpressure", "a streaming generator's unread items before it pauses (0: none)"},
    {nullptr, nullptr}};
constexpr int kNumFields = sizeof(kFields) / sizeof(kFields[0]) - 1;

PyStructSequence_Desc kDesc = {"phalanx._core.TaskCall", "A task or actor call for this worker to run (next_task).",
                               kFields, kNumFields};
PyTypeObject* g_type = nullptr;
}  // namespace

void BindTaskCall(pyb::module_& m) {
  g_type = PyStructSequence_NewType(&kDesc);
  if (g_type == nullptr) throw pyb::error_already_set();
  pyb::object type = pyb::reinterpret_steal<pyb::object>(reinterpret_cast<PyObject*>(g_type));
  type.attr("TASK") = 0;
  type.attr("ACTOR_CREATION") = 1;
  type.attr("ACTOR_METHOD") = 2;
  m.attr("TaskCall") = type;
  Py_INCREF(g_type);  // (kept for MakeTaskCall as long as the process lives)
}

pyb::object MakeTaskCall(std::initializer_list<pyb::object> fields) {
  if (fields.size() != static_cast<size_t>(kNumFields)) throw std::logic_error("TaskCall: wrong number of fields");
  PyObject* o = PyStructSequence_New(g_type);
  if (o == nullptr) throw pyb::error_already_set();
  Py_ssize_t i = 0;
  for (const auto& f : fields) PyStructSequence_SetItem(o, i++, pyb::object(f).release().ptr());  // (steals)
  return pyb::reinterpret_steal<pyb::object>(o);
}

}  // namespace phalanx::py

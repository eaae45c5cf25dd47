// The GCS's tables: the redis-server hashes (and pub/sub channels of the
// same names) that GcsClient reads and writes. Anyone else that reads them
// directly (the Python bindings' table dumps for the CLI and dashboard)
// names them from here.
#pragma once

namespace phalanx::gcs_tables {

inline constexpr char kNodes[] = "nodes";                        // node id hex -> NodeInfo; channel: NodeInfo
inline constexpr char kHeartbeats[] = "heartbeats";              // node id hex -> last beat
inline constexpr char kActors[] = "actors";                      // actor id hex -> ActorInfo; channel: ActorInfo
inline constexpr char kActorCheckpoints[] = "actor_checkpoints";  // actor id hex -> its last kept state
inline constexpr char kPlacementGroups[] = "placement_groups";    // group id hex -> PlacementGroupInfo
inline constexpr char kClients[] = "clients";                    // client id hex -> node id hex
inline constexpr char kFunctions[] = "functions";                // function id hex -> RegisterFunction
inline constexpr char kTasks[] = "tasks";                        // task id hex -> lineage records
inline constexpr char kOutputPrefix[] = "output:";  // + job id hex: a stream of what the job's workers printed
// Jobs (written and read from Python only: python/phalanx/job/table.py): "jobs"
// (submission id -> JSON record), "job_queue", "job_stops", "job_logs:ID",
// "job_agent", "packages:HEX" (a job's runtime_env zips).

}  // namespace phalanx::gcs_tables

"""Jobs: a program (its driver) run on a cluster's head with its code and environment, Ray's job
submission API. `phalanx job submit --working-dir . -- python train.py` on the command line, or:

    from phalanx.job import JobSubmissionClient, JobStatus
    client = JobSubmissionClient("HEAD:6379")
    sid = client.submit_job(entrypoint="python train.py", runtime_env={"working_dir": "."})

The client records the job in the GCS (client.py, table.py); the agent `phalanx start --head` starts
runs it (agent.py). docs/jobs.md says more."""
from phalanx.job.client import (DriverInfo, JobDetails, JobErrorType, JobInfo, JobStatus, JobSubmissionClient,
                                JobType)

__all__ = ["JobSubmissionClient", "JobStatus", "JobDetails", "JobInfo", "JobType", "JobErrorType", "DriverInfo"]

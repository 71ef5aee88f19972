#pragma once
// What the launcher (Open MPI's mpirun, Slurm's srun, MPICH/Intel MPI's Hydra) tells a process through its environment, for the code that runs before MPI starts
// or without it: printing argument errors from one rank only, `loom config --world`, the stop
// grace period. Once MPI runs, ProcessGroups::local_rank() (from MPI itself) is the one to use.
// No MPI calls here: this links into loom_grid.

namespace loom::parallel {

// This process's rank in the job, or 0 when no launcher announces one.
int launcher_rank();
// The job's size, or 1.
int launcher_size();

// Seconds between the SIGTERM that Open MPI's mpirun sends its ranks (on its own SIGTERM or
// Ctrl-C) and its SIGKILL: the MCA parameter odls_base_sigkill_timeout, which mpirun passes to
// the ranks' environment (default 1). -1 when not launched by mpirun (srun: Slurm's KillWait).
double mpirun_kill_grace_s();

}  // namespace loom::parallel

# Open MPI settings for multi-node jobs (sourced, not run) by the launch scripts under scripts/
# and slurm/, and by the test cluster: each is a default that a site's or user's own setting
# (the same variable exported before) overrides. docs/multinode.md explains them.
#
# Out-of-band (mpirun <-> orted, PMIx) TCP keepalive: when a node or its link dies, the launcher
# learns it from an idle connection only after keepalive_time + probes x intvl seconds (Open
# MPI's default: 300 + 9 x 20 = 480 s), and until then mpirun and the surviving daemons wait.
# 5 + 3 x 2 = 11 s declares a silent node lost well before a typical parallel.timeout_s, so the
# launcher, not TCP's retransmission timer (~15 min with net.ipv4.tcp_retries2 = 15), ends the job.
# Keepalive only probes idle connections: a connection with unacknowledged data waits out the
# retransmissions, which is why the kernel setting net.ipv4.tcp_retries2 (docs/multinode.md)
# matters too.
export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-5}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-2}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-3}

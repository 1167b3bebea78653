/* An independent call counter for the capture tests: a PMPI-style
 * interposer that shares no code with the capture library. Each MPI_X (C)
 * and mpi_x_ (gfortran's Fortran name) it defines counts the call and
 * forwards it to the next definition of the same name (dlsym RTLD_NEXT):
 * with LD_PRELOAD="counter.so:capture.so" the capture's wrapper, without
 * it the MPI library. At MPI_Finalize it writes COUNTER_DIR/rank-R.txt,
 * one "Kind count" line per kind called (R from OMPI_COMM_WORLD_RANK).
 *
 * Forwarding without the prototypes: every argument of these MPI
 * functions is an integer or a pointer, so on x86-64 (System V) passing 13
 * longs through hands each callee exactly the arguments it was given (the
 * test skips on other architectures). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef long L;
typedef int (*fwd_t)(L, L, L, L, L, L, L, L, L, L, L, L, L);

static const char *names[] = {"Allreduce", "Iallreduce", "Reduce", "Ireduce", "Bcast", "Ibcast", "Allgather", "Iallgather", "Allgatherv", "Iallgatherv", "Gather", "Igather", "Gatherv", "Igatherv", "Scatter", "Iscatter", "Scatterv", "Iscatterv", "Alltoall", "Ialltoall", "Alltoallv", "Ialltoallv", "Reduce_scatter", "Ireduce_scatter", "Reduce_scatter_block", "Ireduce_scatter_block", "Barrier", "Ibarrier", "Scan", "Iscan", "Exscan", "Iexscan", "Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend", "Recv", "Irecv", "Sendrecv", "Sendrecv_replace", "Probe", "Iprobe", "Wait", "Waitall", "Waitany", "Waitsome", "Test", "Testall", "Testany", "Testsome", "Comm_split", "Comm_split_type", "Comm_dup", "Comm_create", "Comm_free"};
static long counts[59];

static fwd_t next(const char *sym) {
  fwd_t f = (fwd_t)dlsym(RTLD_NEXT, sym);
  if (!f) {
    fprintf(stderr, "counter: no next definition of %s\n", sym);
    abort();
  }
  return f;
}

static void dump(void) {
  const char *dir = getenv("COUNTER_DIR");
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!dir || !rank) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/rank-%s.txt", dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) return;
  for (unsigned i = 0; i < sizeof counts / sizeof *counts; i++)
    if (counts[i]) fprintf(f, "%s %ld\n", names[i], counts[i]);
  fclose(f);
}

#define WRAP(i, cname, fname)                                                       \
  int cname(L a, L b, L c, L d, L e, L f, L g, L h, L j, L k, L l, L m, L n) {       \
    static fwd_t fn;                                                                \
    if (!fn) fn = next(#cname);                                                     \
    counts[i]++;                                                                    \
    return fn(a, b, c, d, e, f, g, h, j, k, l, m, n);                               \
  }                                                                                 \
  void fname(L a, L b, L c, L d, L e, L f, L g, L h, L j, L k, L l, L m, L n) {      \
    static fwd_t fn;                                                                \
    if (!fn) fn = next(#fname);                                                     \
    counts[i]++;                                                                    \
    fn(a, b, c, d, e, f, g, h, j, k, l, m, n);                                      \
  }

WRAP(0, MPI_Allreduce, mpi_allreduce_)
WRAP(1, MPI_Iallreduce, mpi_iallreduce_)
WRAP(2, MPI_Reduce, mpi_reduce_)
WRAP(3, MPI_Ireduce, mpi_ireduce_)
WRAP(4, MPI_Bcast, mpi_bcast_)
WRAP(5, MPI_Ibcast, mpi_ibcast_)
WRAP(6, MPI_Allgather, mpi_allgather_)
WRAP(7, MPI_Iallgather, mpi_iallgather_)
WRAP(8, MPI_Allgatherv, mpi_allgatherv_)
WRAP(9, MPI_Iallgatherv, mpi_iallgatherv_)
WRAP(10, MPI_Gather, mpi_gather_)
WRAP(11, MPI_Igather, mpi_igather_)
WRAP(12, MPI_Gatherv, mpi_gatherv_)
WRAP(13, MPI_Igatherv, mpi_igatherv_)
WRAP(14, MPI_Scatter, mpi_scatter_)
WRAP(15, MPI_Iscatter, mpi_iscatter_)
WRAP(16, MPI_Scatterv, mpi_scatterv_)
WRAP(17, MPI_Iscatterv, mpi_iscatterv_)
WRAP(18, MPI_Alltoall, mpi_alltoall_)
WRAP(19, MPI_Ialltoall, mpi_ialltoall_)
WRAP(20, MPI_Alltoallv, mpi_alltoallv_)
WRAP(21, MPI_Ialltoallv, mpi_ialltoallv_)
WRAP(22, MPI_Reduce_scatter, mpi_reduce_scatter_)
WRAP(23, MPI_Ireduce_scatter, mpi_ireduce_scatter_)
WRAP(24, MPI_Reduce_scatter_block, mpi_reduce_scatter_block_)
WRAP(25, MPI_Ireduce_scatter_block, mpi_ireduce_scatter_block_)
WRAP(26, MPI_Barrier, mpi_barrier_)
WRAP(27, MPI_Ibarrier, mpi_ibarrier_)
WRAP(28, MPI_Scan, mpi_scan_)
WRAP(29, MPI_Iscan, mpi_iscan_)
WRAP(30, MPI_Exscan, mpi_exscan_)
WRAP(31, MPI_Iexscan, mpi_iexscan_)
WRAP(32, MPI_Send, mpi_send_)
WRAP(33, MPI_Ssend, mpi_ssend_)
WRAP(34, MPI_Bsend, mpi_bsend_)
WRAP(35, MPI_Rsend, mpi_rsend_)
WRAP(36, MPI_Isend, mpi_isend_)
WRAP(37, MPI_Issend, mpi_issend_)
WRAP(38, MPI_Ibsend, mpi_ibsend_)
WRAP(39, MPI_Irsend, mpi_irsend_)
WRAP(40, MPI_Recv, mpi_recv_)
WRAP(41, MPI_Irecv, mpi_irecv_)
WRAP(42, MPI_Sendrecv, mpi_sendrecv_)
WRAP(43, MPI_Sendrecv_replace, mpi_sendrecv_replace_)
WRAP(44, MPI_Probe, mpi_probe_)
WRAP(45, MPI_Iprobe, mpi_iprobe_)
WRAP(46, MPI_Wait, mpi_wait_)
WRAP(47, MPI_Waitall, mpi_waitall_)
WRAP(48, MPI_Waitany, mpi_waitany_)
WRAP(49, MPI_Waitsome, mpi_waitsome_)
WRAP(50, MPI_Test, mpi_test_)
WRAP(51, MPI_Testall, mpi_testall_)
WRAP(52, MPI_Testany, mpi_testany_)
WRAP(53, MPI_Testsome, mpi_testsome_)
WRAP(54, MPI_Comm_split, mpi_comm_split_)
WRAP(55, MPI_Comm_split_type, mpi_comm_split_type_)
WRAP(56, MPI_Comm_dup, mpi_comm_dup_)
WRAP(57, MPI_Comm_create, mpi_comm_create_)
WRAP(58, MPI_Comm_free, mpi_comm_free_)

int MPI_Finalize(void) {
  static int (*fn)(void);
  if (!fn) fn = (int (*)(void))dlsym(RTLD_NEXT, "MPI_Finalize");
  dump();
  return fn();
}

void mpi_finalize_(int *ierr) {
  static void (*fn)(int *);
  if (!fn) fn = (void (*)(int *))dlsym(RTLD_NEXT, "mpi_finalize_");
  dump();
  fn(ierr);
}

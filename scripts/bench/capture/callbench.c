/* The capture benchmark's program (scripts/bench/bench-capture.sh).
 * Usage: callbench CALLS BATCH
 * Makes CALLS cheap MPI calls (MPI_Barrier on MPI_COMM_SELF, which the
 * capture records like any collective), timed in batches of BATCH calls,
 * and prints one line: the per-call time of every batch (ns, sorted), then
 * the process's peak resident memory (VmHWM, kB) and its wall time (s). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static long hwm_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long calls = argc > 1 ? atol(argv[1]) : 1000000, batch = argc > 2 ? atol(argv[2]) : 10000;
  long batches = calls / batch;
  double *per = malloc(sizeof(double) * (batches > 0 ? batches : 1));
  double t0 = now();
  for (long b = 0; b < batches; b++) {
    double s = now();
    for (long i = 0; i < batch; i++) MPI_Barrier(MPI_COMM_SELF);
    per[b] = (now() - s) / batch * 1e9;
  }
  double wall = now() - t0;
  qsort(per, batches, sizeof *per, cmp);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    printf("p50_ns %.1f p10_ns %.1f p90_ns %.1f batches %ld wall_s %.3f", per[batches / 2], per[batches / 10], per[batches * 9 / 10], batches, wall);
  }
  MPI_Finalize();
  if (rank == 0) printf(" hwm_kb %ld\n", hwm_kb());
  return 0;
}

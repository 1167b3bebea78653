/* A small MPI program for the capture tests: a fixed number of calls of
 * many kinds per iteration (no test calls, whose count depends on timing):
 * every collective kind, the v-variants with uneven counts, the scans,
 * reductions other than sums, and nonblocking collectives completed after
 * point-to-point traffic.
 * Usage: app ITERS [ABORT_AT]  (rank 0 calls MPI_Abort at that iteration). */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 10;
  int abort_at = argc > 2 ? atoi(argv[2]) : -1;
  double a[64] = {0}, b[64 * 16] = {0};
  MPI_Comm half, dup;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int right = (rank + 1) % size, left = (rank + size - 1) % size, partner = rank ^ 1;
  /* member j's block is j + 1 elements; rank r sends member j (r + j) % 3 + 1 */
  int cnt[16], dsp[16], tcnt[16], tdsp[16], ia[2] = {rank, -rank}, ib[2];
  for (int j = 0, at = 0, tat = 0; j < size && j < 16; j++) {
    cnt[j] = j + 1, dsp[j] = at, at += cnt[j];
    tcnt[j] = (rank + j) % 3 + 1, tdsp[j] = tat, tat += tcnt[j];
  }
  for (int i = 0; i < iters; i++) {
    if (i == abort_at && rank == 0) MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Allreduce(a, b, 64, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Bcast(a, 8, MPI_DOUBLE, 0, dup);
    MPI_Reduce(a, b, 4, MPI_DOUBLE, MPI_MAX, 0, half);
    MPI_Allgather(a, 2, MPI_DOUBLE, b, 2, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Gather(a, 1, MPI_DOUBLE, b, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Scatter(b, 1, MPI_DOUBLE, a, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Alltoall(a, 1, MPI_DOUBLE, b, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Scan(a, b, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Request r[2];
    MPI_Irecv(b, 16, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(a, 16, MPI_DOUBLE, right, 7, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Request q;
    MPI_Irecv(b, 4, MPI_DOUBLE, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &q);
    MPI_Send(a, 4, MPI_DOUBLE, right, 9, MPI_COMM_WORLD);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    MPI_Sendrecv(a, 3, MPI_DOUBLE, right, 5, b, 3, MPI_DOUBLE, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (partner < size) {
      if (rank % 2 == 0) {
        MPI_Ssend(a, 2, MPI_INT, partner, 11, MPI_COMM_WORLD);
        MPI_Recv(b, 2, MPI_INT, partner, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(b, 2, MPI_INT, partner, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Ssend(a, 2, MPI_INT, partner, 11, MPI_COMM_WORLD);
      }
    }
    MPI_Request rb;
    MPI_Iallreduce(a, b, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rb);
    MPI_Wait(&rb, MPI_STATUS_IGNORE);
    MPI_Barrier(half);
    MPI_Allgatherv(a, rank + 1, MPI_DOUBLE, b, cnt, dsp, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Gatherv(a, rank + 1, MPI_DOUBLE, b, cnt, dsp, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Scatterv(b, cnt, dsp, MPI_DOUBLE, a, rank + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Alltoallv(a, tcnt, tdsp, MPI_DOUBLE, b, tcnt, tdsp, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Reduce_scatter(b + 512, a, cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(ia, ib, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Exscan(a, b, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Iallgatherv(a, rank + 1, MPI_DOUBLE, b + 256, cnt, dsp, MPI_DOUBLE, MPI_COMM_WORLD, &r[0]);
    MPI_Iexscan(a + 16, b + 512, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r[1]);
    MPI_Sendrecv(a, 3, MPI_DOUBLE, right, 6, b + 768, 3, MPI_DOUBLE, left, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Igatherv(a, rank + 1, MPI_DOUBLE, b, cnt, dsp, MPI_DOUBLE, 0, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&half);
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return 0;
}

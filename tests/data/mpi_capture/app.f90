! The Fortran twin of app.c: the same calls in the same order, through `use mpi`.
! Usage: app_f ITERS
program app_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, iters, i, half, dup, right, left, partner, q, rb
  integer :: r(2)
  character(len=32) :: arg
  double precision :: a(64), b(64 * 16)
  integer :: ia(2), ib(2), cnt(16), dsp(16), tcnt(16), tdsp(16), j
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  iters = 10
  if (command_argument_count() > 0) then
    call get_command_argument(1, arg)
    read (arg, *) iters
  end if
  a = 0d0
  b = 0d0
  ia = 0
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  right = mod(rank + 1, nprocs)
  left = mod(rank + nprocs - 1, nprocs)
  partner = ieor(rank, 1)
  ! member j's block is j + 1 elements; rank r sends member j mod(r + j, 3) + 1
  ia(1) = rank
  ia(2) = -rank
  dsp(1) = 0
  tdsp(1) = 0
  do j = 0, min(nprocs, 16) - 1
    cnt(j + 1) = j + 1
    tcnt(j + 1) = mod(rank + j, 3) + 1
    if (j > 0) then
      dsp(j + 1) = dsp(j) + cnt(j)
      tdsp(j + 1) = tdsp(j) + tcnt(j)
    end if
  end do
  do i = 1, iters
    call MPI_Allreduce(a, b, 64, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Bcast(a, 8, MPI_DOUBLE_PRECISION, 0, dup, ierr)
    call MPI_Reduce(a, b, 4, MPI_DOUBLE_PRECISION, MPI_MAX, 0, half, ierr)
    call MPI_Allgather(a, 2, MPI_DOUBLE_PRECISION, b, 2, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call MPI_Gather(a, 1, MPI_DOUBLE_PRECISION, b, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Scatter(b, 1, MPI_DOUBLE_PRECISION, a, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Alltoall(a, 1, MPI_DOUBLE_PRECISION, b, 1, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call MPI_Scan(a, b, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Irecv(b, 16, MPI_DOUBLE_PRECISION, left, 7, MPI_COMM_WORLD, r(1), ierr)
    call MPI_Isend(a, 16, MPI_DOUBLE_PRECISION, right, 7, MPI_COMM_WORLD, r(2), ierr)
    call MPI_Waitall(2, r, MPI_STATUSES_IGNORE, ierr)
    call MPI_Irecv(b, 4, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, q, ierr)
    call MPI_Send(a, 4, MPI_DOUBLE_PRECISION, right, 9, MPI_COMM_WORLD, ierr)
    call MPI_Wait(q, MPI_STATUS_IGNORE, ierr)
    call MPI_Sendrecv(a, 3, MPI_DOUBLE_PRECISION, right, 5, b, 3, MPI_DOUBLE_PRECISION, left, 5, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    if (partner < nprocs) then
      if (mod(rank, 2) == 0) then
        call MPI_Ssend(ia, 2, MPI_INTEGER, partner, 11, MPI_COMM_WORLD, ierr)
        call MPI_Recv(ib, 2, MPI_INTEGER, partner, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
      else
        call MPI_Recv(ib, 2, MPI_INTEGER, partner, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
        call MPI_Ssend(ia, 2, MPI_INTEGER, partner, 11, MPI_COMM_WORLD, ierr)
      end if
    end if
    call MPI_Iallreduce(a, b, 8, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, rb, ierr)
    call MPI_Wait(rb, MPI_STATUS_IGNORE, ierr)
    call MPI_Barrier(half, ierr)
    call MPI_Allgatherv(a, rank + 1, MPI_DOUBLE_PRECISION, b, cnt, dsp, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call MPI_Gatherv(a, rank + 1, MPI_DOUBLE_PRECISION, b, cnt, dsp, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Scatterv(b, cnt, dsp, MPI_DOUBLE_PRECISION, a, rank + 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Alltoallv(a, tcnt, tdsp, MPI_DOUBLE_PRECISION, b, tcnt, tdsp, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    call MPI_Reduce_scatter(b(513), a, cnt, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(ia, ib, 2, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
    call MPI_Exscan(a, b, 2, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
    call MPI_Iallgatherv(a, rank + 1, MPI_DOUBLE_PRECISION, b(257), cnt, dsp, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, r(1), ierr)
    call MPI_Iexscan(a(17), b(513), 2, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, r(2), ierr)
    call MPI_Sendrecv(a, 3, MPI_DOUBLE_PRECISION, right, 6, b(769), 3, MPI_DOUBLE_PRECISION, left, 6, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call MPI_Waitall(2, r, MPI_STATUSES_IGNORE, ierr)
    call MPI_Igatherv(a, rank + 1, MPI_DOUBLE_PRECISION, b, cnt, dsp, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, q, ierr)
    call MPI_Wait(q, MPI_STATUS_IGNORE, ierr)
  end do
  call MPI_Comm_free(half, ierr)
  call MPI_Comm_free(dup, ierr)
  call MPI_Finalize(ierr)
end program app_f

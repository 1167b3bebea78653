! Fortran calls beyond app.f90's: nonblocking collectives, v-variants, waitsome, iprobe,
! comm_split_type (tests/mpi_capture.rs checks the capture against the counter).
program more
  use mpi
  implicit none
  logical :: flag
  integer :: ierr, rank, np, r(2), outc, idx(2), k, nc, counts(8), displs(8), i
  double precision :: a(8), b(64)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  a = 1d0
  counts = 1
  do i = 1, 8
    displs(i) = i - 1
  end do
  do k = 1, 5
    call MPI_Ibcast(a, 4, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, r(1), ierr)
    call MPI_Ibarrier(MPI_COMM_WORLD, r(2), ierr)
    call MPI_Waitsome(2, r, outc, idx, MPI_STATUSES_IGNORE, ierr)
    call MPI_Waitall(2, r, MPI_STATUSES_IGNORE, ierr)
    call MPI_Gatherv(a, 1, MPI_DOUBLE_PRECISION, b, counts, displs, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Scatterv(b, counts, displs, MPI_DOUBLE_PRECISION, a, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
    call MPI_Reduce_scatter_block(b, a, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Iallgather(a, 1, MPI_DOUBLE_PRECISION, b, 1, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, r(1), ierr)
    call MPI_Wait(r(1), MPI_STATUS_IGNORE, ierr)
    call MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, flag, MPI_STATUS_IGNORE, ierr)
  end do
  call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, nc, ierr)
  call MPI_Comm_free(nc, ierr)
  call MPI_Finalize(ierr)
end program more

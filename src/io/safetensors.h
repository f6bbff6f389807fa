/* safetensors files: a validating read-only mmap reader and an atomic, deterministic writer.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}},
 * then the data area.  Offsets are relative to the start of the data area.
 *
 * The reader accepts exactly what the reference (Rust) implementation accepts, restricted to the dtypes this
 * project uses: the tensors, sorted by offset, tile the data area with no gap, no overlap and no trailing byte.
 * The library assumes a little-endian host. */
#ifndef H3S_IO_SAFETENSORS_H
#define H3S_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "h3s.h"
#include "h3s_io.h"

/* Largest header accepted (the reference implementation's limit). */
#define H3S_ST_MAX_HEADER ((uint64_t)100000000)

/* h3s_st_entry, h3s_st_file, h3s_st_open / count / entry_at / find / close, h3s_st_meta, h3s_st_write and
 * h3s_st_write_meta are public (include/h3s_io.h); a tensor whose bytes are not aligned to its element size
 * (possible only in files other writers made) is copied once into aligned memory owned by the file. */
const char *h3s_st_path(const h3s_st_file *f);
uint64_t h3s_st_file_size(const h3s_st_file *f);

/* Incremental writer for files too large to hold in memory.  begin() validates the entries (their data pointers
 * are ignored) and writes the header to a temporary file; append() takes the data bytes of the tensors, in entry
 * order, in pieces of any size; commit() checks that exactly every byte arrived, then fsyncs and renames.  commit()
 * and abort() free the writer (commit() also on failure, removing the temporary file); after a failed append() call
 * abort().  h3s_st_write is begin + one append per tensor + commit, so both give the same bytes. */
typedef struct h3s_st_writer h3s_st_writer;
h3s_status h3s_st_writer_begin(const char *path, const h3s_st_entry *entries, int64_t count, h3s_st_writer **out);
h3s_status h3s_st_writer_append(h3s_st_writer *w, const void *data, size_t len);
h3s_status h3s_st_writer_commit(h3s_st_writer *w);
void h3s_st_writer_abort(h3s_st_writer *w); /* NULL is fine */

/* Every writer (h3s_st_write, the incremental writer, h3s_io_write_file_atomic, hence every report and manifest)
 * replaces only a regular file: when something else is at the output path (a symbolic link, even one to a regular
 * file or a dangling one; a directory, FIFO, device or socket) it fails with H3S_ERR_INVALID and touches nothing.
 * The check is made when the temporary file is created and again just before the rename.  A symbolic link in
 * the directories above the file is followed as usual.  The file replaced keeps its permission bits (st_mode &
 * 07777, given to the temporary file at both points); a new file gets 0666 & ~umask. */

/* h3s_io_check_output (the checks an output path passes before a command computes anything) is public
 * (include/h3s_io.h). */

/* h3s_io_read_small_file (a whole small file into memory) is public: include/h3s_io.h. */

/* Shared helpers for the io layer's other atomic writers (modeldir: config.json, manifests). */
/* Create a new empty file next to `path` (".<base>.tmp-<pid>-<n>", of the base name at most its first
 * H3S_IO_TEMP_BASE_MAX bytes, so that any name the file system takes for the output leaves room for the suffix);
 * *tmp_path is malloc'd. */
h3s_status h3s_io_create_temp(const char *path, int *fd, char **tmp_path);
/* The bytes of a base name a temporary name keeps: all, or the first H3S_IO_TEMP_BASE_MAX cut back to a UTF-8
 * boundary. */
#define H3S_IO_TEMP_BASE_MAX 100
int h3s_io_temp_base_len(const char *base);
/* h3s_io_write_file_atomic (a whole buffer, atomically) is public (include/h3s_io.h). */
/* The temporaries in progress, for h3s_io_remove_temporaries (src/io/tempfiles.c): a file (dir 0), or an init's
 * temporary directory (dir 1: removed with its entries, as init removes it itself).  Forgotten once gone or renamed
 * into place.  A path longer than 4095 bytes, or a 65th temporary at once, is not remembered (a process ending on a
 * signal leaves it behind).  The _locked forms are for a caller holding h3s_io_temp_lock (init, around the publication
 * of its directory, which must not overlap a removal). */
/* A new temporary made exclusively and remembered at once: a file (dir 0: open O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0666;
 * returns the descriptor) or a directory (dir 1: mkdir 0777; returns 0); -1 with errno set on failure, ECANCELED
 * once h3s_io_remove_temporaries has run. */
int h3s_io_temp_make(const char *path, int dir);
void h3s_io_temp_forget(const char *path);
void h3s_io_temp_lock(void);
void h3s_io_temp_unlock(void);
int h3s_io_temp_ended_locked(void);
void h3s_io_temp_remember_locked(const char *path, int dir);
void h3s_io_temp_forget_locked(const char *path);
/* fsync the directory holding `path` (best effort: some file systems refuse it). */
void h3s_io_sync_parent_dir(const char *path);

#endif

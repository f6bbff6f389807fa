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

/* Largest header accepted (the reference implementation's limit). */
#define H3S_ST_MAX_HEADER ((uint64_t)100000000)

typedef struct h3s_st_entry {
    const char *name;
    h3s_tensor tensor; /* from h3s_st_open: tensor.data points into the read-only mapping (do not write) */
} h3s_st_entry;

typedef struct h3s_st_file h3s_st_file;

/* mmap the file read-only and validate the WHOLE header before any tensor is touched.  Errors: H3S_ERR_IO (cannot
 * open or map), H3S_ERR_FORMAT (malformed; the file and the tensor are named), H3S_ERR_DTYPE (a dtype other than
 * F64, F32, BF16, F16, I64, BOOL), H3S_ERR_UNSUPPORTED (more than H3S_MAX_DIMS dims).
 * Entries are ordered by their position in the file.  A tensor whose bytes are not aligned to its element size
 * (possible only in files other writers made) is copied once into aligned memory owned by the file. */
h3s_status h3s_st_open(const char *path, h3s_st_file **out);
int64_t h3s_st_count(const h3s_st_file *f);
const h3s_st_entry *h3s_st_entry_at(const h3s_st_file *f, int64_t i);    /* NULL if i is out of range */
const h3s_st_entry *h3s_st_find(const h3s_st_file *f, const char *name); /* NULL if absent */
const char *h3s_st_path(const h3s_st_file *f);
uint64_t h3s_st_file_size(const h3s_st_file *f);
void h3s_st_close(h3s_st_file *f); /* NULL is fine */

/* Write atomically: a temporary file in the same directory, fsync, rename; on any error nothing is left at `path`
 * (a file already there stays as it was).  Entries are written in the given order, contiguously; names must be
 * unique, valid UTF-8 and not "__metadata__"; dtypes F64, F32, BF16, F16, I64, BOOL; host tensors only.  The bytes
 * depend on the entries alone: header keys in entry order, no spaces, padded with spaces to a multiple of 8. */
h3s_status h3s_st_write(const char *path, const h3s_st_entry *entries, int64_t count);

/* One string pair of a file's "__metadata__" object. */
typedef struct h3s_st_meta {
    const char *key, *value;
} h3s_st_meta;

/* h3s_st_write with a "__metadata__" object first in the header, its keys in the given order (valid UTF-8,
 * unique).  With nmeta == 0 the bytes are exactly h3s_st_write's. */
h3s_status h3s_st_write_meta(const char *path, const h3s_st_entry *entries, int64_t count, const h3s_st_meta *meta,
                             int64_t nmeta);

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
 * the directories above the file is followed as usual. */

/* The checks an output path must pass before a command computes anything: the above; its last component names a
 * file; the directory holding it exists; and the path where the file would land (the realpath of that directory,
 * then the file name) is none of `inputs` (realpath, or the same inode when the output exists) and lies inside
 * none of `dirs` (realpath).  NULL entries are skipped.  Failure: H3S_ERR_INVALID naming the output and the input
 * or directory it collides with; H3S_ERR_IO when the directory cannot be resolved. */
h3s_status h3s_io_check_output(const char *path, const char *const *inputs, int ninputs, const char *const *dirs,
                               int ndirs);

/* Read a whole small file (at most `limit` bytes, else H3S_ERR_FORMAT); only a regular file is read (a FIFO or
 * device is refused without blocking).  *out is NUL-terminated and malloc'd. */
h3s_status h3s_io_read_small_file(const char *path, size_t limit, char **out, size_t *len);

/* Shared helpers for the io layer's other atomic writers (modeldir: config.json, manifests). */
/* Create a new empty file next to `path` (".<base>.tmp-<pid>-<n>"); *tmp_path is malloc'd. */
h3s_status h3s_io_create_temp(const char *path, int *fd, char **tmp_path);
/* Write a whole buffer atomically (temp file, fsync, rename). */
h3s_status h3s_io_write_file_atomic(const char *path, const void *data, size_t len);
/* fsync the directory holding `path` (best effort: some file systems refuse it). */
void h3s_io_sync_parent_dir(const char *path);

#endif

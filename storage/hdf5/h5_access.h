/* How every libhdf5 open of a store file is set up, shared by the modules
 * of storage/hdf5/ (nothing outside that folder includes hdf5.h). */
#ifndef CELLAR_H5_ACCESS_H
#define CELLAR_H5_ACCESS_H

#include <hdf5.h>

/* The file access properties every open of a store file uses (the caller
 * closes them), or -1.  A second open of the same file (storage/hdf5/h5_stream.c)
 * must use these too: libhdf5 refuses a shared open whose close degree
 * differs. */
hid_t h5_file_access_props(void);

#endif

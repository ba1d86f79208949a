#include "storage/hdf5/h5_access.h"

hid_t h5_file_access_props(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return -1;
    /* STRONG: closing the file id closes whatever is still open in it, so
     * the file is really closed.  No file locks: a server must not stop
     * writers from replacing the file it serves. */
    if (H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_file_locking(fapl, 0, 1) < 0) {
        H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

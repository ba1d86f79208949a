/* HDF5 objects as h5py shows them (storage/hdf5/h5_grove.h). */
#include "storage/hdf5/h5_grove.h"

#include <stdlib.h>
#include <string.h>

#include "common/u64set.h"
#include "storage/hdf5/h5_heap.h"
#include "storage/hdf5/h5_impl.h"
#include "storage/node_impl.h"

/* Attribute values bigger than this are not read (as h5.c skips them). */
#define GROVE_ATTR_MAX_BYTES ((uint64_t)64 << 20)
/* Nesting of type descriptions (compound in compound, arrays, enums). */
#define GROVE_TYPE_MAX_DEPTH 16
/* Link values (soft link targets, external link file and path). */
#define GROVE_LINK_VAL_MAX ((size_t)1 << 16)

/* ---------------------------------------------------------------- types */

static char *arena_h5_string(arena *a, char *s)
{
    char *copy = s ? arena_strdup(a, s) : NULL;
    if (s)
        H5free_memory(s);
    return copy;
}

/* The enum member value at raw (the base type's bytes) as an integer. */
static int64_t enum_value(const unsigned char *raw, size_t size, int big_endian, int is_signed)
{
    uint64_t v = 0;
    for (size_t i = 0; i < size && i < 8; i++) {
        size_t at = big_endian ? i : size - 1 - i;
        v = (v << 8) | raw[at];
    }
    if (is_signed && size < 8 && (v >> (size * 8 - 1)) & 1)
        v |= ~(uint64_t)0 << (size * 8);
    return (int64_t)v;
}

static h5g_type *describe(hid_t t, arena *a, int depth, cellar_error *err);

static int describe_compound(hid_t t, h5g_type *d, arena *a, int depth, cellar_error *err)
{
    int n = H5Tget_nmembers(t);
    if (n < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read a compound type's members");
    d->n_members = (size_t)n;
    d->members = arena_calloc(a, (size_t)n ? (size_t)n : 1, sizeof *d->members);
    if (!d->members)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    int packed = 0;
    for (int i = 0; i < n; i++) {
        h5g_member *m = &d->members[i];
        m->name = arena_h5_string(a, H5Tget_member_name(t, (unsigned)i));
        m->offset = H5Tget_member_offset(t, (unsigned)i);
        hid_t mt = H5Tget_member_type(t, (unsigned)i);
        if (!m->name || mt < 0) {
            if (mt >= 0)
                H5Tclose(mt);
            return h5_fail(err, CELLAR_EFORMAT, "cannot read a compound type's member");
        }
        m->type = describe(mt, a, depth + 1, err);
        H5Tclose(mt);
        if (!m->type)
            return err && err->code ? err->code : CELLAR_ENOMEM;
        if (m->type->mem_size != m->type->size)
            packed = 1;
    }
    /* Delivered as stored, but with a variable-length string inside,
     * members packed in order (a char * is not the 16 stored bytes). */
    d->mem_size = d->size;
    if (packed) {
        size_t at = 0;
        for (size_t i = 0; i < d->n_members; i++) {
            d->members[i].mem_offset = at;
            at += d->members[i].type->mem_size;
        }
        d->mem_size = at;
    } else {
        for (size_t i = 0; i < d->n_members; i++)
            d->members[i].mem_offset = d->members[i].offset;
    }
    if (n == 2 && !strcmp(d->members[0].name, "r") && !strcmp(d->members[1].name, "i")) {
        const h5g_type *r = d->members[0].type, *im = d->members[1].type;
        d->is_complex = r->cls == GROVE_T_FLOAT && im->cls == GROVE_T_FLOAT &&
                        r->size == im->size && r->order == im->order &&
                        (r->size == 4 || r->size == 8) && d->members[0].offset == 0 &&
                        d->members[1].offset == r->size && d->size == 2 * r->size;
    }
    return 0;
}

static int describe_enum(hid_t t, h5g_type *d, arena *a, int depth, cellar_error *err)
{
    hid_t base = H5Tget_super(t);
    if (base < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read an enum's base type");
    d->base = describe(base, a, depth + 1, err);
    H5Tclose(base);
    if (!d->base)
        return err && err->code ? err->code : CELLAR_ENOMEM;
    int n = H5Tget_nmembers(t);
    if (n < 0 || d->base->size > 8)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read an enum's members");
    d->n_members = (size_t)n;
    d->members = arena_calloc(a, (size_t)n ? (size_t)n : 1, sizeof *d->members);
    if (!d->members)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    int seen_false = 0, seen_true = 0;
    for (int i = 0; i < n; i++) {
        h5g_member *m = &d->members[i];
        unsigned char raw[16] = {0};
        m->name = arena_h5_string(a, H5Tget_member_name(t, (unsigned)i));
        if (!m->name || H5Tget_member_value(t, (unsigned)i, raw) < 0)
            return h5_fail(err, CELLAR_EFORMAT, "cannot read an enum's member");
        m->value = enum_value(raw, d->base->size, d->base->order == 1, d->base->sign == 1);
        seen_false |= !strcmp(m->name, "FALSE") && m->value == 0;
        seen_true |= !strcmp(m->name, "TRUE") && m->value == 1;
    }
    d->is_bool = n == 2 && d->size == 1 && seen_false && seen_true;
    d->mem_size = d->size;
    return 0;
}

static int describe_array(hid_t t, h5g_type *d, arena *a, int depth, cellar_error *err)
{
    int nd = H5Tget_array_ndims(t);
    hsize_t dims[GROVE_MAX_DIMS];
    if (nd < 0 || nd > GROVE_MAX_DIMS || H5Tget_array_dims2(t, dims) < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read an array type's dimensions");
    d->ndims = nd;
    for (int i = 0; i < nd; i++)
        d->dims[i] = dims[i];
    hid_t base = H5Tget_super(t);
    if (base < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read an array type's base");
    d->base = describe(base, a, depth + 1, err);
    H5Tclose(base);
    if (!d->base)
        return err && err->code ? err->code : CELLAR_ENOMEM;
    d->mem_size = d->size;
    return 0;
}

static h5g_type *describe(hid_t t, arena *a, int depth, cellar_error *err)
{
    if (depth > GROVE_TYPE_MAX_DEPTH) {
        cellar_fail(err, CELLAR_EFORMAT, "a type nested more than %d deep", GROVE_TYPE_MAX_DEPTH);
        return NULL;
    }
    h5g_type *d = arena_calloc(a, 1, sizeof *d);
    if (!d) {
        cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        return NULL;
    }
    H5T_class_t cls = H5Tget_class(t);
    if (cls < 0) {
        h5_fail(err, CELLAR_EFORMAT, "cannot read a type's class");
        return NULL;
    }
    d->cls = (int)cls;
    d->size = H5Tget_size(t);
    d->mem_size = d->size;
    int rc = 0;
    switch (cls) {
    case H5T_INTEGER:
        d->sign = H5Tget_sign(t) == H5T_SGN_2;
        /* fallthrough */
    case H5T_FLOAT:
    case H5T_BITFIELD:
        d->order = H5Tget_order(t) == H5T_ORDER_BE;
        break;
    case H5T_STRING: {
        htri_t vl = H5Tis_variable_str(t);
        d->cset = (int)H5Tget_cset(t);
        d->strpad = (int)H5Tget_strpad(t);
        d->vlen_str = vl > 0;
        if (vl < 0)
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot read a string type");
        if (d->vlen_str)
            d->mem_size = sizeof(char *);
        break;
    }
    case H5T_OPAQUE: {
        char *tag = H5Tget_tag(t);
        d->tag = tag ? arena_h5_string(a, tag) : "";
        break;
    }
    case H5T_COMPOUND:
        rc = describe_compound(t, d, a, depth, err);
        break;
    case H5T_ENUM:
        rc = describe_enum(t, d, a, depth, err);
        break;
    case H5T_ARRAY:
        rc = describe_array(t, d, a, depth, err);
        break;
    case H5T_VLEN: {
        hid_t base = H5Tget_super(t);
        d->base = base >= 0 ? describe(base, a, depth + 1, err) : NULL;
        if (base >= 0)
            H5Tclose(base);
        if (!d->base)
            rc = err && err->code ? err->code : h5_fail(err, CELLAR_EFORMAT, "cannot read a vlen type");
        break;
    }
    case H5T_REFERENCE:
        d->ref_region = H5Tequal(t, H5T_STD_REF_DSETREG) > 0;
        break;
    default:
        break;
    }
    return rc ? NULL : d;
}

int h5g_type_readable(const h5g_type *t)
{
    switch (t->cls) {
    case GROVE_T_INTEGER:
    case GROVE_T_FLOAT:
    case GROVE_T_BITFIELD:
    case GROVE_T_OPAQUE:
    case GROVE_T_REFERENCE:
    case GROVE_T_ENUM:
        return 1;
    case GROVE_T_STRING:
        return t->vlen_str || t->size > 0;
    case GROVE_T_COMPOUND:
        for (size_t i = 0; i < t->n_members; i++)
            if (!h5g_type_readable(t->members[i].type))
                return 0;
        return 1;
    case GROVE_T_ARRAY:
        return t->base && t->base->mem_size == t->base->size && h5g_type_readable(t->base);
    default:
        return 0;
    }
}

/* The memory type of a read of t (stored as ftype): the stored type
 * itself, but variable-length strings as C strings and a compound holding
 * them packed (h5g_type.mem_offset).  The caller closes it. */
static hid_t memtype_of(hid_t ftype, const h5g_type *t)
{
    if (t->mem_size == t->size && !(t->cls == GROVE_T_STRING && t->vlen_str))
        return H5Tcopy(ftype);
    if (t->cls == GROVE_T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && (H5Tset_size(mt, H5T_VARIABLE) < 0 ||
                        H5Tset_cset(mt, t->cset == 1 ? H5T_CSET_UTF8 : H5T_CSET_ASCII) < 0)) {
            H5Tclose(mt);
            mt = H5I_INVALID_HID;
        }
        return mt;
    }
    if (t->cls != GROVE_T_COMPOUND)
        return H5I_INVALID_HID;
    hid_t mt = H5Tcreate(H5T_COMPOUND, t->mem_size);
    for (size_t i = 0; mt >= 0 && i < t->n_members; i++) {
        const h5g_member *m = &t->members[i];
        hid_t fm = H5Tget_member_type(ftype, (unsigned)i);
        hid_t mm = fm >= 0 ? memtype_of(fm, m->type) : H5I_INVALID_HID;
        if (mm < 0 || H5Tinsert(mt, m->name, m->mem_offset, mm) < 0) {
            H5Tclose(mt);
            mt = H5I_INVALID_HID;
        }
        if (mm >= 0)
            H5Tclose(mm);
        if (fm >= 0)
            H5Tclose(fm);
    }
    return mt;
}

/* Replaces every C string pointer libhdf5 put in the elements at p with an
 * arena copy (NULL stays NULL).  -1 when out of memory. */
static int take_strings(unsigned char *p, const h5g_type *t, uint64_t count, arena *a)
{
    if (t->cls == GROVE_T_STRING && t->vlen_str) {
        for (uint64_t i = 0; i < count; i++) {
            char *s;
            memcpy(&s, p + i * sizeof s, sizeof s);
            char *copy = s ? arena_strdup(a, s) : NULL;
            if (s && !copy)
                return -1;
            memcpy(p + i * sizeof s, &copy, sizeof copy);
        }
        return 0;
    }
    if (t->cls != GROVE_T_COMPOUND || t->mem_size == t->size)
        return 0;
    for (uint64_t i = 0; i < count; i++)
        for (size_t m = 0; m < t->n_members; m++)
            if (take_strings(p + i * t->mem_size + t->members[m].mem_offset, t->members[m].type,
                             1, a))
                return -1;
    return 0;
}

/* --------------------------------------------------------------- objects */

static int classify_object(hid_t obj, h5g_object *out, const char *path, cellar_error *err)
{
    switch (H5Iget_type(obj)) {
    case H5I_GROUP: out->kind = GROVE_GROUP; break;
    case H5I_DATASET: out->kind = GROVE_DATASET; break;
    case H5I_DATATYPE: out->kind = GROVE_DATATYPE; break;
    default:
        H5Oclose(obj);
        return cellar_fail(err, CELLAR_EFORMAT, "'%s' is no group, dataset or datatype", path);
    }
    out->hid = obj;
    return 0;
}

/* The value of the soft or external link at path. */
static int link_value(hid_t loc, const char *path, const H5L_info_t *li, hid_t lapl,
                      arena *a, h5g_object *out, cellar_error *err)
{
    size_t size = li->u.val_size;
    if (size == 0 || size > GROVE_LINK_VAL_MAX)
        return cellar_fail(err, CELLAR_EFORMAT, "the link '%s' has a value of %zu bytes", path,
                           size);
    char *val = arena_alloc(a, size + 1);
    if (!val)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (H5Lget_val(loc, path, val, size, lapl) < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the link '%s'", path);
    val[size] = '\0';
    if (li->type == H5L_TYPE_SOFT) {
        out->kind = GROVE_SOFT_LINK;
        out->target_path = val;
        return 0;
    }
    unsigned flags = 0;
    const char *file = NULL, *obj = NULL;
    if (H5Lunpack_elink_val(val, size, &flags, &file, &obj) < 0 || !file || !obj)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the external link '%s'", path);
    out->kind = GROVE_EXTERNAL_LINK;
    out->target_file = arena_strdup(a, file);
    out->target_path = arena_strdup(a, obj);
    if (!out->target_file || !out->target_path)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    return 0;
}

/* The object at path, libhdf5 following the external links the version
 * followed on the way (h5_object_open). */
static int open_object(hid_t loc, const char *path, const h5g_object *out, hid_t *obj,
                       cellar_error *err)
{
    h5_elink_refused_take();
    *obj = h5_object_open(loc, path, out->targets);
    if (*obj >= 0)
        return 0;
    if (h5_elink_refused_take())
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s goes through an external link to another file, which is not "
                           "followed", path);
    return h5_fail(err, CELLAR_EFORMAT, "cannot open '%s'", path);
}

static int open_locked(node *root, const char *path, h5g_links links, arena *a,
                       h5g_object *out, cellar_error *err)
{
    h5_quiet();
    hid_t loc = h5_node_object(root);
    if (loc < 0)
        return cellar_fail(err, CELLAR_EFORMAT, "not an HDF5 file");
    if (!path || !strcmp(path, "/")) {
        hid_t obj = H5Oopen(loc, "/", H5P_DEFAULT);
        if (obj < 0)
            return h5_fail(err, CELLAR_EFORMAT, "cannot open the root group");
        return classify_object(obj, out, "/", err);
    }
    hid_t lapl = h5_link_access();
    if (lapl < 0)
        return h5_fail(err, CELLAR_EINTERNAL, "cannot set up link access");
    H5L_info_t li;
    h5_elink_refused_take();
    h5_following_set(out->targets);
    herr_t got = *path ? H5Lget_info(loc, path, &li, lapl) : -1;
    h5_following_set(NULL);
    if (got < 0) {
        if (h5_elink_refused_take())
            return cellar_fail(err, CELLAR_EFORMAT,
                               "%s goes through an external link to another file, which "
                               "is not followed", path);
        return cellar_fail(err, CELLAR_ENOTFOUND, "%s is not a valid path", path);
    }
    hid_t obj = H5I_INVALID_HID;
    int rc = 0;
    if (li.type == H5L_TYPE_HARD) {
        rc = open_object(loc, path, out, &obj, err);
        return rc ? rc : classify_object(obj, out, path, err);
    }
    if (li.type != H5L_TYPE_SOFT && li.type != H5L_TYPE_EXTERNAL)
        return cellar_fail(err, CELLAR_EFORMAT, "%s is a user-defined link, not supported", path);
    h5_following_set(out->targets);
    rc = link_value(loc, path, &li, lapl, a, out, err);
    h5_following_set(NULL);
    if (rc || links == GROVE_LINKS_NONE)
        return rc;
    if (li.type == H5L_TYPE_EXTERNAL) {
        /* followed as h5grove follows it when the version followed its
         * file (storage/ext_targets.h); else shown as the link */
        cellar_error why;
        cellar_error_clear(&why);
        h5_following_set(out->targets);
        rc = h5_external_link_followed(loc, path, path, out->targets, &why);
        h5_following_set(NULL);
        if (rc && links == GROVE_LINKS_ONLY_VALID)
            return 0;
        if (rc)
            return cellar_fail(err, CELLAR_EFORMAT, "%s", why.detail);
    }
    cellar_error local;
    cellar_error_clear(&local);
    rc = open_object(loc, path, out, &obj, &local);
    if (!rc) {
        out->target_path = NULL;
        out->target_file = NULL;
        return classify_object(obj, out, path, err);
    }
    if (links == GROVE_LINKS_ONLY_VALID)
        return 0;
    if (strstr(local.detail, "external link"))
        return cellar_fail(err, CELLAR_EFORMAT,
                           "%s is a soft link through an external link, which is not followed",
                           path);
    return cellar_fail(err, CELLAR_ENOTFOUND, "Cannot resolve the soft link at %s", path);
}

int h5g_open(node *root, const char *path, h5g_links links, arena *a, h5g_object *out,
             cellar_error *err)
{
    memset(out, 0, sizeof *out);
    out->hid = -1;
    int slot = node_locked_call_enter();
    out->targets = h5_node_targets(root);
    int rc = open_locked(root, path, links, a, out, err);
    if (!rc) /* a file reached through an external link: read unchecked */
        out->heap = out->hid >= 0 && h5_object_in_other_file(out->hid, root)
                        ? NULL
                        : h5_node_heap(root);
    node_locked_call_leave(slot);
    return rc;
}

void h5g_close(h5g_object *o)
{
    if (o && o->hid >= 0) {
        int slot = node_locked_call_enter();
        H5Oclose(o->hid);
        node_locked_call_leave(slot);
        o->hid = -1;
    }
}

int h5g_children(const h5g_object *g, arena *a, const char ***names, size_t *n,
                 cellar_error *err)
{
    int slot = node_locked_call_enter();
    int rc = h5_list_links(g->hid, "group", a, names, n, err);
    node_locked_call_leave(slot);
    return rc;
}

#define GROVE_VISIT_MAX 10000000

typedef struct visit_list {
    arena *a;
    const char **names;
    size_t n, cap;
    int rc;
} visit_list;

static herr_t visit_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
    (void)g, (void)info;
    visit_list *l = data;
    if (l->n == GROVE_VISIT_MAX) {
        l->rc = CELLAR_ETOOBIG;
        return -1;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        const char **grown = arena_calloc(l->a, cap, sizeof *grown);
        if (!grown) {
            l->rc = CELLAR_ENOMEM;
            return -1;
        }
        if (l->n)
            memcpy(grown, l->names, l->n * sizeof *grown);
        l->names = grown;
        l->cap = cap;
    }
    if (!(l->names[l->n++] = arena_strdup(l->a, name))) {
        l->rc = CELLAR_ENOMEM;
        return -1;
    }
    return 0;
}

int h5g_visit(const h5g_object *g, arena *a, const char ***names, size_t *n,
              cellar_error *err)
{
    visit_list l = {.a = a};
    int slot = node_locked_call_enter();
    h5_quiet();
    herr_t st = H5Lvisit(g->hid, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &l);
    int rc = l.rc == CELLAR_ENOMEM  ? cellar_fail(err, l.rc, "out of memory")
             : l.rc                 ? cellar_fail(err, l.rc, "the group holds over %d links",
                                                  GROVE_VISIT_MAX)
             : st < 0 ? h5_fail(err, CELLAR_EFORMAT, "cannot walk the group's links")
                      : 0;
    node_locked_call_leave(slot);
    *names = l.names;
    *n = l.n;
    return rc;
}

int h5g_type_of(const h5g_object *o, arena *a, h5g_type **out, cellar_error *err)
{
    int slot = node_locked_call_enter();
    h5_quiet();
    hid_t t = o->kind == GROVE_DATASET ? H5Dget_type(o->hid) : H5Tcopy(o->hid);
    *out = t >= 0 ? describe(t, a, 0, err) : NULL;
    if (t < 0)
        h5_fail(err, CELLAR_EFORMAT, "cannot read the type");
    else
        H5Tclose(t);
    node_locked_call_leave(slot);
    return *out ? 0 : (err && err->code ? err->code : CELLAR_ENOMEM);
}

/* ndim and shape of a dataspace. */
static int space_shape(hid_t space, int *ndim, int64_t *shape, cellar_error *err)
{
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    if (cls == H5S_NULL) {
        *ndim = -1;
        return 0;
    }
    if (cls == H5S_SCALAR) {
        *ndim = 0;
        return 0;
    }
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dims[GROVE_MAX_DIMS];
    if (cls != H5S_SIMPLE || nd < 0 || nd > GROVE_MAX_DIMS ||
        H5Sget_simple_extent_dims(space, dims, NULL) < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read a dataspace");
    for (int d = 0; d < nd; d++) {
        if (dims[d] > (hsize_t)INT64_MAX)
            return cellar_fail(err, CELLAR_EFORMAT, "an impossible shape");
        shape[d] = (int64_t)dims[d];
    }
    *ndim = nd;
    return 0;
}

/* The dataspace of dset.  A virtual dataset's comes from its creation
 * properties (the extent its first mapping was written with): for an
 * unlimited one, H5Dget_space opens every source file to size it, and those
 * are other files, any path (a FIFO there blocks for good). */
static hid_t dataset_space(hid_t dset)
{
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return -1;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    hid_t space = -1;
    if (layout == H5D_VIRTUAL) {
        size_t n = 0;
        if (H5Pget_virtual_count(dcpl, &n) >= 0 && n > 0)
            space = H5Pget_virtual_vspace(dcpl, 0);
    } else if (layout >= 0) {
        space = H5Dget_space(dset);
    }
    H5Pclose(dcpl);
    return space;
}

int h5g_shape(const h5g_object *o, int *ndim, int64_t *shape, cellar_error *err)
{
    int slot = node_locked_call_enter();
    h5_quiet();
    hid_t space = dataset_space(o->hid);
    int rc = space >= 0 ? space_shape(space, ndim, shape, err)
                        : h5_fail(err, CELLAR_EFORMAT, "cannot read the dataspace");
    if (space >= 0)
        H5Sclose(space);
    node_locked_call_leave(slot);
    return rc;
}

static int layout_locked(const h5g_object *o, arena *a, int *chunk_ndim, int64_t *chunks,
                         h5g_filter **filters, size_t *n_filters, cellar_error *err)
{
    *chunk_ndim = 0;
    *filters = NULL;
    *n_filters = 0;
    hid_t dcpl = H5Dget_create_plist(o->hid);
    if (dcpl < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot read the dataset's properties");
    int rc = 0;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t dims[GROVE_MAX_DIMS];
        int nd = H5Pget_chunk(dcpl, GROVE_MAX_DIMS, dims);
        if (nd < 0 || nd > GROVE_MAX_DIMS) {
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the chunk shape");
            goto done;
        }
        for (int d = 0; d < nd; d++)
            chunks[d] = (int64_t)dims[d];
        *chunk_ndim = nd;
    }
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the filters");
        goto done;
    }
    *filters = arena_calloc(a, nf ? (size_t)nf : 1, sizeof **filters);
    if (!*filters) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, config = 0;
        size_t nelmts = 0;
        char name[257] = {0};
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nelmts, NULL, sizeof name - 1,
                                         name, &config);
        if (id < 0) {
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot read a filter");
            goto done;
        }
        (*filters)[i].id = (int)id;
        (*filters)[i].name = arena_strdup(a, name);
        if (!(*filters)[i].name) {
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
            goto done;
        }
    }
    *n_filters = (size_t)nf;
done:
    H5Pclose(dcpl);
    return rc;
}

int h5g_layout(const h5g_object *o, arena *a, int *chunk_ndim, int64_t *chunks,
               h5g_filter **filters, size_t *n_filters, cellar_error *err)
{
    int slot = node_locked_call_enter();
    h5_quiet();
    int rc = layout_locked(o, a, chunk_ndim, chunks, filters, n_filters, err);
    node_locked_call_leave(slot);
    return rc;
}

/* ------------------------------------------------------------ attributes */

typedef struct attr_list {
    arena *a;
    const h5_heap_file *heap;
    int with_values;
    h5g_attr *items;
    size_t n, cap;
    int rc;
    cellar_error *err;
} attr_list;

static int product(int ndim, const int64_t *shape, uint64_t *out)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] && n > UINT64_MAX / (uint64_t)shape[d])
            return -1;
        n *= (uint64_t)shape[d];
    }
    *out = ndim < 0 ? 0 : n;
    return 0;
}

/* Values of ftype are stored as heap ids (variable-length strings), which
 * are checked (h5_heap_check_attr, h5_heap_check_dataset) where cellar
 * holds the file's bytes (heap_checkable).  Fields of compounds are read
 * unchecked, as in h5.c. */
static int vlen_strings(hid_t ftype)
{
    return H5Tget_class(ftype) == H5T_STRING && H5Tis_variable_str(ftype) > 0;
}

static int heap_checkable(const h5_heap_file *heap)
{
    return heap && (heap->fd >= 0 || heap->rd);
}

/* Reads attribute attr's values into at->values; heap ids first checked
 * against heap (libhdf5 follows them unchecked): an attribute that fails
 * is unreadable, as h5.c skips it. */
static int attr_read(hid_t attr, hid_t ftype, hid_t space, h5g_attr *at,
                     const h5_heap_file *heap, arena *a)
{
    if (!h5g_type_readable(at->type) || at->count == 0)
        return at->count == 0 ? 0 : (at->unreadable = 1, 0);
    if (heap_checkable(heap) && vlen_strings(ftype)) {
        cellar_error local;
        cellar_error_clear(&local);
        int rc = h5_heap_check_attr(attr, (size_t)at->count, heap, &local);
        if (rc == CELLAR_ENOMEM)
            return -2;
        if (rc) {
            at->unreadable = 1;
            return 0;
        }
    }
    uint64_t bytes = at->count * at->type->mem_size;
    if (at->type->mem_size && at->count > GROVE_ATTR_MAX_BYTES / at->type->mem_size) {
        at->unreadable = 1;
        return 0;
    }
    hid_t mt = memtype_of(ftype, at->type);
    unsigned char *tmp = mt >= 0 ? calloc(1, bytes ? bytes : 1) : NULL;
    int rc = -1;
    if (tmp && H5Aread(attr, mt, tmp) >= 0) {
        at->values = arena_alloc(a, bytes ? bytes : 1);
        if (at->values) {
            memcpy(at->values, tmp, bytes);
            rc = take_strings(at->values, at->type, at->count, a) ? -2 : 0;
        } else {
            rc = -2;
        }
        H5Dvlen_reclaim(mt, space, H5P_DEFAULT, tmp);
    }
    if (rc == -1) {
        at->unreadable = 1;
        rc = 0;
    }
    free(tmp);
    if (mt >= 0)
        H5Tclose(mt);
    return rc;
}

static herr_t attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    attr_list *l = data;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        h5g_attr *grown = arena_calloc(l->a, cap, sizeof *grown);
        if (!grown) {
            l->rc = cellar_fail(l->err, CELLAR_ENOMEM, "out of memory");
            return -1;
        }
        if (l->n)
            memcpy(grown, l->items, l->n * sizeof *grown);
        l->items = grown;
        l->cap = cap;
    }
    h5g_attr *at = &l->items[l->n];
    memset(at, 0, sizeof *at);
    at->name = arena_strdup(l->a, name);
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t space = attr >= 0 ? H5Aget_space(attr) : H5I_INVALID_HID;
    hid_t ftype = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = 0;
    if (!at->name) {
        rc = cellar_fail(l->err, CELLAR_ENOMEM, "out of memory");
    } else if (space < 0 || ftype < 0 || space_shape(space, &at->ndim, at->shape, &local) ||
               product(at->ndim, at->shape, &at->count) ||
               !(at->type = describe(ftype, l->a, 0, &local))) {
        rc = local.code == CELLAR_ENOMEM ? cellar_fail(l->err, CELLAR_ENOMEM, "out of memory")
                                         : 1; /* skipped, as h5.c skips it */
    } else if (l->with_values && attr_read(attr, ftype, space, at, l->heap, l->a)) {
        rc = cellar_fail(l->err, CELLAR_ENOMEM, "out of memory");
    }
    if (ftype >= 0)
        H5Tclose(ftype);
    if (space >= 0)
        H5Sclose(space);
    if (attr >= 0)
        H5Aclose(attr);
    if (rc < 0) {
        l->rc = rc;
        return -1;
    }
    if (rc == 0)
        l->n++;
    return 0;
}

/* Whether obj tracks the creation order of its attributes (what h5py asks
 * its creation property list).  Read from the object header's flags, which
 * that list is made from: getting the list copies every property of it,
 * the better part of a group's /meta/ of many datasets. */
static int attrs_by_creation(hid_t obj)
{
    H5I_type_t type = H5Iget_type(obj);
    if (type != H5I_GROUP && type != H5I_DATASET && type != H5I_DATATYPE)
        return 0;
#if H5_VERSION_GE(1, 12, 0)
    H5O_native_info_t info;
    if (H5Oget_native_info(obj, &info, H5O_NATIVE_INFO_HDR) < 0)
        return 0;
#else
    H5O_info_t info;
    if (H5Oget_info2(obj, &info, H5O_INFO_HDR) < 0)
        return 0;
#endif
    return (info.hdr.flags & H5O_HDR_ATTR_CRT_ORDER_TRACKED) != 0;
}

static int attrs_locked(const h5g_object *o, int with_values, arena *a, h5g_attr **out,
                        size_t *n, cellar_error *err)
{
    attr_list l = {.a = a, .heap = o->heap, .with_values = with_values, .err = err};
    herr_t st = -1;
    if (attrs_by_creation(o->hid)) {
        hsize_t idx = 0;
        st = H5Aiterate2(o->hid, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, attr_cb, &l);
    }
    if (st < 0 && !l.rc) {
        l.n = 0;
        hsize_t idx = 0;
        st = H5Aiterate2(o->hid, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_cb, &l);
    }
    if (l.rc)
        return l.rc;
    if (st < 0)
        return h5_fail(err, CELLAR_EFORMAT, "cannot list the attributes");
    *out = l.items;
    *n = l.n;
    return 0;
}

int h5g_attrs(const h5g_object *o, int with_values, arena *a, h5g_attr **out, size_t *n,
              cellar_error *err)
{
    *out = NULL;
    *n = 0;
    int slot = node_locked_call_enter();
    h5_quiet();
    int rc = attrs_locked(o, with_values, a, out, n, err);
    node_locked_call_leave(slot);
    return rc;
}

/* ----------------------------------------------------------------- reads */

static int read_locked(const h5g_object *o, const h5g_type *t, int ndim, const int64_t *start,
                       const int64_t *step, const int64_t *count, uint64_t max_bytes,
                       arena *a, void **out, cellar_error *err)
{
    *out = NULL;
    if (!h5g_type_readable(t))
        return cellar_fail(err, CELLAR_EFORMAT, "values of this type (class %d) are not read",
                           t->cls);
    uint64_t n = 1;
    if (product(ndim, count, &n) || (t->mem_size && n > UINT64_MAX / t->mem_size))
        return cellar_fail(err, CELLAR_ETOOBIG, "the selection is too large");
    uint64_t bytes = n * t->mem_size;
    if (max_bytes && bytes > max_bytes)
        return cellar_fail(err, CELLAR_ETOOBIG,
                           "the selection holds %llu bytes, over the limit of %llu",
                           (unsigned long long)bytes, (unsigned long long)max_bytes);
    *out = arena_alloc(a, bytes ? bytes : 1);
    if (!*out)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    if (n == 0)
        return 0;
    int rc = h5_values_followed(o->hid, "the dataset", o->targets, err);
    if (rc)
        return rc;
    hid_t fspace = H5Dget_space(o->hid), mspace = H5I_INVALID_HID;
    hid_t ftype = H5Dget_type(o->hid), mt = H5I_INVALID_HID;
    unsigned char *tmp = NULL;
    if (fspace < 0 || ftype < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the dataset");
        goto done;
    }
    if (ndim > 0) {
        hsize_t s[GROVE_MAX_DIMS], st[GROVE_MAX_DIMS], c[GROVE_MAX_DIMS];
        for (int d = 0; d < ndim; d++) {
            s[d] = (hsize_t)start[d];
            st[d] = (hsize_t)step[d];
            c[d] = (hsize_t)count[d];
        }
        if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, s, st, c, NULL) < 0) {
            rc = h5_fail(err, CELLAR_EFORMAT, "cannot select the values");
            goto done;
        }
        mspace = H5Screate_simple(ndim, c, NULL);
    } else {
        mspace = H5Screate(H5S_SCALAR);
    }
    mt = memtype_of(ftype, t);
    tmp = calloc(1, bytes);
    if (mspace < 0 || mt < 0 || !tmp) {
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
        goto done;
    }
    if (heap_checkable(o->heap) && vlen_strings(ftype)) {
        cellar_error local;
        cellar_error_clear(&local);
        rc = h5_heap_check_dataset(o->hid, mspace, fspace, H5P_DEFAULT, (size_t)n, o->heap,
                                   &local);
        if (rc) {
            rc = rc == CELLAR_ENOMEM ? cellar_fail(err, rc, "out of memory")
                                     : cellar_fail(err, CELLAR_EFORMAT,
                                                   "cannot read these strings safely: %s",
                                                   local.detail);
            goto done;
        }
    }
    if (H5Dread(o->hid, mt, mspace, fspace, H5P_DEFAULT, tmp) < 0) {
        rc = h5_fail(err, CELLAR_EFORMAT, "cannot read the values");
        goto done;
    }
    memcpy(*out, tmp, bytes);
    if (take_strings(*out, t, n, a))
        rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory");
    H5Dvlen_reclaim(mt, mspace, H5P_DEFAULT, tmp);
done:
    free(tmp);
    if (mt >= 0)
        H5Tclose(mt);
    if (ftype >= 0)
        H5Tclose(ftype);
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    return rc;
}

int h5g_read(const h5g_object *o, const h5g_type *t, int ndim, const int64_t *start,
             const int64_t *step, const int64_t *count, uint64_t max_bytes, arena *a,
             void **out, cellar_error *err)
{
    int slot = node_locked_call_enter();
    h5_quiet();
    int rc = read_locked(o, t, ndim, start, step, count, max_bytes, a, out, err);
    node_locked_call_leave(slot);
    return rc;
}

/* ----------------------------------------------------------------- probe */

typedef struct grove_walk {
    node *root;
    uint64_t max_objects, objects;
    uint64_t max_bytes, bytes;
    uint64_t *broken;
    char **stack;   /* group paths still to walk (malloc'd) */
    size_t depth, cap;
    u64set seen;    /* object addresses of the groups walked */
} grove_walk;

static int push_path(grove_walk *w, char *path)
{
    if (w->depth == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        char **s = realloc(w->stack, cap * sizeof *s);
        if (!s)
            return -1;
        w->stack = s;
        w->cap = cap;
    }
    w->stack[w->depth++] = path;
    return 0;
}

/* 1 when the group at obj was not walked yet (and marks it), 0 when it
 * was, -1 when out of memory. */
static int first_visit(grove_walk *w, hid_t obj)
{
    uint64_t addr = 0;
    int slot = node_locked_call_enter();
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t info;
    int ok = H5Oget_info3(obj, &info, H5O_INFO_BASIC) >= 0;
    if (ok)
        memcpy(&addr, &info.token, sizeof addr < sizeof info.token ? sizeof addr : sizeof info.token);
#else
    H5O_info_t info;
    int ok = H5Oget_info2(obj, &info, H5O_INFO_BASIC) >= 0;
    if (ok)
        addr = (uint64_t)info.addr;
#endif
    node_locked_call_leave(slot);
    if (!ok)
        return 0;
    return u64set_add(&w->seen, addr);
}

/* Whether the node backend reads a dataset of type t itself (the probe's
 * node walk then covers its values). */
static int node_reads(const h5g_type *t)
{
    if (t->cls == GROVE_T_INTEGER || t->cls == GROVE_T_FLOAT)
        return t->size <= 8;
    if (t->cls == GROVE_T_STRING)
        return 1;
    return t->cls == GROVE_T_ENUM && t->base && t->base->cls == GROVE_T_INTEGER;
}

/* Reads every value of dataset o in blocks of rows, within the budget. */
static int probe_values(grove_walk *w, const h5g_object *o, const h5g_type *t, arena *a,
                        cellar_error *err)
{
    int ndim = 0;
    int64_t shape[GROVE_MAX_DIMS], start[GROVE_MAX_DIMS] = {0}, step[GROVE_MAX_DIMS],
                                 count[GROVE_MAX_DIMS];
    cellar_error local;
    cellar_error_clear(&local);
    if (h5g_shape(o, &ndim, shape, &local)) {
        (*w->broken)++;
        return 0;
    }
    if (ndim < 0 || !h5g_type_readable(t))
        return 0;
    uint64_t row = t->mem_size ? t->mem_size : 1;
    for (int d = 0; d < ndim; d++) {
        step[d] = 1;
        count[d] = shape[d];
        if (shape[d] == 0)
            return 0;
        if (d > 0)
            row = row > UINT64_MAX / (uint64_t)shape[d] ? UINT64_MAX : row * (uint64_t)shape[d];
    }
    int64_t rows = ndim ? shape[0] : 1;
    int64_t per = ndim && row < ((uint64_t)8 << 20) ? (int64_t)(((uint64_t)8 << 20) / row) : 1;
    for (int64_t r = 0; r < rows; r += per) {
        if (ndim) {
            start[0] = r;
            count[0] = rows - r < per ? rows - r : per;
        }
        uint64_t bytes = (ndim ? (uint64_t)count[0] : 1) * row;
        if (w->bytes + bytes > w->max_bytes)
            return 0;
        w->bytes += bytes;
        void *vals = NULL;
        cellar_error_clear(&local);
        int rc = h5g_read(o, t, ndim, start, step, count, 0, a, &vals, &local);
        if (rc == CELLAR_ENOMEM)
            return cellar_fail(err, rc, "out of memory probing");
        if (rc) {
            (*w->broken)++;
            return 0;
        }
    }
    return 0;
}

/* Everything the routes may ask of the object at path. */
static int probe_object(grove_walk *w, const char *path, cellar_error *err)
{
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
    h5g_object o;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = 0;
    if (h5g_open(w->root, path, GROVE_LINKS_ONLY_VALID, a, &o, &local)) {
        if (local.code == CELLAR_ENOMEM)
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
        else
            (*w->broken)++;
        goto done;
    }
    w->objects++;
    if (o.kind == GROVE_SOFT_LINK || o.kind == GROVE_EXTERNAL_LINK)
        goto done;
    h5g_attr *attrs = NULL;
    size_t n_attrs = 0;
    cellar_error_clear(&local);
    if (h5g_attrs(&o, 1, a, &attrs, &n_attrs, &local))
        (*w->broken)++;
    if (o.kind == GROVE_GROUP) {
        int fresh = first_visit(w, o.hid);
        char *copy = fresh > 0 ? strdup(path) : NULL;
        if (fresh < 0 || (fresh > 0 && (!copy || push_path(w, copy)))) {
            free(copy);
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
        }
        goto closing;
    }
    h5g_type *t = NULL;
    cellar_error_clear(&local);
    if (h5g_type_of(&o, a, &t, &local)) {
        (*w->broken)++;
        goto closing;
    }
    if (o.kind == GROVE_DATASET) {
        int ndim = 0, cnd = 0;
        int64_t shape[GROVE_MAX_DIMS], chunks[GROVE_MAX_DIMS];
        h5g_filter *filters = NULL;
        size_t nf = 0;
        cellar_error_clear(&local);
        if (h5g_shape(&o, &ndim, shape, &local) ||
            h5g_layout(&o, a, &cnd, chunks, &filters, &nf, &local))
            (*w->broken)++;
        else if (!node_reads(t))
            rc = probe_values(w, &o, t, a, err);
    }
closing:
    h5g_close(&o);
done:
    arena_free(a);
    return rc;
}

static int probe_group(grove_walk *w, const char *path, cellar_error *err)
{
    arena *a = arena_new();
    if (!a)
        return cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
    h5g_object g;
    cellar_error local;
    cellar_error_clear(&local);
    int rc = 0;
    const char **names = NULL;
    size_t n = 0;
    if (h5g_open(w->root, path, GROVE_LINKS_ONLY_VALID, a, &g, &local) || g.kind != GROVE_GROUP) {
        if (g.hid >= 0)
            h5g_close(&g);
        goto done;
    }
    cellar_error_clear(&local);
    if (h5g_children(&g, a, &names, &n, &local)) {
        (*w->broken)++;
        h5g_close(&g);
        goto done;
    }
    h5g_close(&g);
    size_t plen = strlen(path);
    for (size_t i = 0; i < n && !rc && w->objects < w->max_objects; i++) {
        char *child = arena_printf(a, "%s%s%s", path, plen && path[plen - 1] == '/' ? "" : "/",
                                   names[i]);
        rc = child ? probe_object(w, child, err)
                   : cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
    }
done:
    arena_free(a);
    return rc;
}

int h5g_probe_walk(node *root, uint64_t max_objects, uint64_t max_bytes, uint64_t *broken,
                   cellar_error *err)
{
    grove_walk w = {.root = root, .max_objects = max_objects, .max_bytes = max_bytes,
                    .broken = broken};
    int rc = probe_object(&w, "/", err);
    if (!rc) { /* /paths/ walks every link of the file */
        arena *a = arena_new();
        h5g_object g;
        cellar_error local;
        cellar_error_clear(&local);
        const char **names = NULL;
        size_t n = 0;
        if (!a)
            rc = cellar_fail(err, CELLAR_ENOMEM, "out of memory probing");
        else if (h5g_open(root, "/", GROVE_LINKS_NONE, a, &g, &local) == 0) {
            if (h5g_visit(&g, a, &names, &n, &local))
                (*broken)++;
            h5g_close(&g);
        }
        arena_free(a);
    }
    while (!rc && w.depth && w.objects < w.max_objects) {
        char *path = w.stack[--w.depth];
        rc = probe_group(&w, path, err);
        free(path);
    }
    while (w.depth)
        free(w.stack[--w.depth]);
    free(w.stack);
    u64set_free(&w.seen);
    return rc;
}

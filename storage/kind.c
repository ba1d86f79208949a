#include "storage/kind.h"

#include <string.h>
#include <strings.h>

const char *store_kind_name(store_kind k)
{
    switch (k) {
    case KIND_ANNDATA: return "anndata";
    case KIND_MUDATA: return "mudata";
    case KIND_TREEDATA: return "treedata";
    default: return "unknown";
    }
}

store_kind store_kind_detect(node *root)
{
    const char *et = node_attr_string(root, "encoding-type");
    if (et && strcasecmp(et, "treedata") == 0)
        return KIND_TREEDATA;
    if (et && strcasecmp(et, "mudata") == 0)
        return KIND_MUDATA;
    if (et && strcmp(et, "anndata") != 0)
        return KIND_UNKNOWN;
    if (node_get_info(root)->type != NODE_GROUP)
        return KIND_UNKNOWN;
    node *mod = node_child_opt(root, "mod");
    if (mod && node_get_info(mod)->type == NODE_GROUP && !et)
        return KIND_MUDATA;
    /* treedata 0.1.x wrote encoding-type "anndata", and 0.0.x an AnnData
     * with raw.treedata beside it; their trees give them away. */
    if (node_child_opt(root, "obst") || node_child_opt(root, "vart") ||
        node_child_opt(root, "raw.treedata"))
        return KIND_TREEDATA;
    return KIND_ANNDATA;
}

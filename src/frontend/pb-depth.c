/* pb-depth.c — rejects protobuf messages nested deeper than a limit before protobuf-c unpacks
 * them. protobuf-c recurses once per nested message with no limit, so a crafted model (graphs in
 * attributes in nodes in graphs ...) could overflow the stack; this scan walks the wire format
 * with the schema's descriptors, recursing only into message-typed fields, to a bounded depth. */
#include "onnx-impl.h"

#define MAX_NESTING 64

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d, uint32_t id) {
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].id == id) return &d->fields[i];
    return NULL;
}

/* Returns the depth reached, or -1 once it exceeds MAX_NESTING. Malformed input is left for
 * protobuf-c to reject: the scan just stops. */
static int scan(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth) {
    if (depth > MAX_NESTING) return -1;
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key)) return depth;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &len)) return depth;
            break;
        case 1:
            if (end - p < 8) return depth;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return depth;
            p += 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return depth;
            const ProtobufCFieldDescriptor *f = find_field(d, (uint32_t)(key >> 3));
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                scan(f->descriptor, p, p + len, depth + 1) < 0)
                return -1;
            p += len;
            break;
        }
        default: return depth; /* groups and invalid wire types: protobuf-c rejects them */
        }
    }
    return depth;
}

bool dl_pb_nesting_ok(const ProtobufCMessageDescriptor *d, const void *data, size_t size) {
    const uint8_t *p = data;
    return scan(d, p, p + size, 0) >= 0;
}

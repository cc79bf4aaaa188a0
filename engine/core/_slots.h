/* A `__slots__` field's offset, for the C extensions that read or write objects at their slots as the member
   descriptors do (engine/core/_kvcore.c, engine/core/_steprec.c, roofline/cost/_stepcost.c, roofline/sim/_simcore.c;
   setup.py gives them this folder as an include directory). */
#ifndef ROOFLINE_SLOTS_H
#define ROOFLINE_SLOTS_H

#include <Python.h>
#include <structmember.h>

/* The offset of `name`'s slot in objects of `type`: a member descriptor of an object, as `__slots__` makes, found
   as attribute lookup finds it (through the bases). -1 where it is none, or, `writable`, where it is read-only; no
   exception is set. */
static inline Py_ssize_t member_slot_offset(PyTypeObject *type, PyObject *name, int writable) {
    PyObject *d = _PyType_Lookup(type, name); /* (borrowed; no exception set) */
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == T_OBJECT_EX && !(writable && (m->flags & READONLY)) ? m->offset : -1;
}

#endif

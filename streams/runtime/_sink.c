/* C accelerator of streams/runtime/direct_sink.py's hot loops (optional: caching.py falls back to Python). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyMethodDef module_methods[] = {
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "streams.runtime._sink",
    .m_doc = "C implementation of the hot loops of streams.runtime.direct_sink.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sink(void)
{
    return PyModule_Create(&module_def);
}

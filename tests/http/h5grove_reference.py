"""h5grove itself (PyPI's h5grove, its tornado app) serving a folder on
127.0.0.1: the reference the h5grove routes of cellar are compared with
(tests/http/test_h5grove.py) and measured against (bench/h5grove.py).

    python h5grove_reference.py ROOT PORT
"""

import sys

import tornado.ioloop
import tornado.web
from h5grove.tornado_utils import get_handlers


def main() -> None:
    root, port = sys.argv[1], int(sys.argv[2])
    app = tornado.web.Application(get_handlers(root, allow_origin="*"))
    app.listen(port, address="127.0.0.1")
    print("h5grove ready", flush=True)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()

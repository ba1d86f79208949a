"""h5grove reference for `make bench`: h5grove's own tornado handlers
(`h5grove.tornado_utils.get_handlers`, the package's documented way to
serve a folder; it ships no server program) on 127.0.0.1.

    python bench/h5grove_server.py ROOT PORT
"""

import sys

import tornado.ioloop
import tornado.web
from h5grove.tornado_utils import get_handlers


def main():
    root, port = sys.argv[1], int(sys.argv[2])
    app = tornado.web.Application(get_handlers(root, allow_origin="*"))
    app.listen(port, address="127.0.0.1")
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()

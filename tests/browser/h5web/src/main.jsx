// h5web's App over @h5web/app's H5GroveProvider, pointed at the h5grove
// server given in the page's query: ?url=http://127.0.0.1:PORT/h5grove
// &file=NAME&path=/dataset (tests/http/test_h5web.py).
import '@h5web/app/styles.css';
import { App, H5GroveProvider } from '@h5web/app';
import { createRoot } from 'react-dom/client';

const q = new URLSearchParams(window.location.search);
createRoot(document.getElementById('root')).render(
  <H5GroveProvider url={q.get('url')} filepath={q.get('file')}>
    <App initialPath={q.get('path') || '/'} sidebarOpen disableDarkMode />
  </H5GroveProvider>,
);

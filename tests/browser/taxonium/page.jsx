// The page the browser test opens: taxonium-component from npm, its server
// backend pointed at ?backend= (a store tree's .../taxonium prefix).
import React from 'react';
import { createRoot } from 'react-dom/client';
import Taxonium from 'taxonium-component';

const backend = new URLSearchParams(window.location.search).get('backend');
createRoot(document.getElementById('root')).render(
  <div style={{ width: '100%', height: '100%' }}>
    <Taxonium backendUrl={backend} />
  </div>,
);

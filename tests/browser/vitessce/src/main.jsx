// The page of tests/http/test_vitessce.py: Vitessce from the npm package,
// given its config (a JSON object in the URL's fragment) by the driver.
import React from 'react';
import { createRoot } from 'react-dom/client';
import { PluginAsyncFunction, Vitessce } from 'vitessce';

const config = JSON.parse(decodeURIComponent(location.hash.slice(1)));
const root = createRoot(document.getElementById('root'));
// Vitessce maps Ensembl ids to gene symbols (and looks up alternative
// terms) from a table on vitessce.io; the test reaches nothing beyond
// 127.0.0.1, so the page has no such mapping.
const offline = [
  new PluginAsyncFunction('getTermMapping', async () => new Map()),
  new PluginAsyncFunction('getAlternativeTerms', async () => []),
];
root.render(<Vitessce config={config} height={760} theme="light" pluginAsyncFunctions={offline} />);
window.vitessceConfig = config;

from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.error_body import ErrorBody
from ...models.job_page import JobPage
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    topic: str | Unset = UNSET,
    status: str | Unset = UNSET,
    key: str | Unset = UNSET,
    run_at_from: str | Unset = UNSET,
    run_at_to: str | Unset = UNSET,
    unconsumed_by: str | Unset = UNSET,
    held: bool | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["topic"] = topic

    params["status"] = status

    params["key"] = key

    params["run_at_from"] = run_at_from

    params["run_at_to"] = run_at_to

    params["unconsumed_by"] = unconsumed_by

    params["held"] = held

    params["limit"] = limit

    params["cursor"] = cursor


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/jobs",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ErrorBody | JobPage | None:
    if response.status_code == 200:
        response_200 = JobPage.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = ErrorBody.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = ErrorBody.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = ErrorBody.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = ErrorBody.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = ErrorBody.from_dict(response.json())



        return response_409

    if response.status_code == 413:
        response_413 = ErrorBody.from_dict(response.json())



        return response_413

    if response.status_code == 415:
        response_415 = ErrorBody.from_dict(response.json())



        return response_415

    if response.status_code == 429:
        response_429 = ErrorBody.from_dict(response.json())



        return response_429

    if response.status_code == 503:
        response_503 = ErrorBody.from_dict(response.json())



        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ErrorBody | JobPage]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    topic: str | Unset = UNSET,
    status: str | Unset = UNSET,
    key: str | Unset = UNSET,
    run_at_from: str | Unset = UNSET,
    run_at_to: str | Unset = UNSET,
    unconsumed_by: str | Unset = UNSET,
    held: bool | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,

) -> Response[ErrorBody | JobPage]:
    """ `GET /v1/jobs` — jobs by id, without payloads, a page at a time.
    `next_cursor` is null on the last page. Paging by id stays correct while
    rows change: no job is shown twice or skipped.

    Args:
        topic (str | Unset):
        status (str | Unset):
        key (str | Unset):
        run_at_from (str | Unset):
        run_at_to (str | Unset):
        unconsumed_by (str | Unset):
        held (bool | Unset):
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | JobPage]
     """


    kwargs = _get_kwargs(
        topic=topic,
status=status,
key=key,
run_at_from=run_at_from,
run_at_to=run_at_to,
unconsumed_by=unconsumed_by,
held=held,
limit=limit,
cursor=cursor,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    topic: str | Unset = UNSET,
    status: str | Unset = UNSET,
    key: str | Unset = UNSET,
    run_at_from: str | Unset = UNSET,
    run_at_to: str | Unset = UNSET,
    unconsumed_by: str | Unset = UNSET,
    held: bool | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,

) -> ErrorBody | JobPage | None:
    """ `GET /v1/jobs` — jobs by id, without payloads, a page at a time.
    `next_cursor` is null on the last page. Paging by id stays correct while
    rows change: no job is shown twice or skipped.

    Args:
        topic (str | Unset):
        status (str | Unset):
        key (str | Unset):
        run_at_from (str | Unset):
        run_at_to (str | Unset):
        unconsumed_by (str | Unset):
        held (bool | Unset):
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | JobPage
     """


    return sync_detailed(
        client=client,
topic=topic,
status=status,
key=key,
run_at_from=run_at_from,
run_at_to=run_at_to,
unconsumed_by=unconsumed_by,
held=held,
limit=limit,
cursor=cursor,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    topic: str | Unset = UNSET,
    status: str | Unset = UNSET,
    key: str | Unset = UNSET,
    run_at_from: str | Unset = UNSET,
    run_at_to: str | Unset = UNSET,
    unconsumed_by: str | Unset = UNSET,
    held: bool | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,

) -> Response[ErrorBody | JobPage]:
    """ `GET /v1/jobs` — jobs by id, without payloads, a page at a time.
    `next_cursor` is null on the last page. Paging by id stays correct while
    rows change: no job is shown twice or skipped.

    Args:
        topic (str | Unset):
        status (str | Unset):
        key (str | Unset):
        run_at_from (str | Unset):
        run_at_to (str | Unset):
        unconsumed_by (str | Unset):
        held (bool | Unset):
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ErrorBody | JobPage]
     """


    kwargs = _get_kwargs(
        topic=topic,
status=status,
key=key,
run_at_from=run_at_from,
run_at_to=run_at_to,
unconsumed_by=unconsumed_by,
held=held,
limit=limit,
cursor=cursor,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    topic: str | Unset = UNSET,
    status: str | Unset = UNSET,
    key: str | Unset = UNSET,
    run_at_from: str | Unset = UNSET,
    run_at_to: str | Unset = UNSET,
    unconsumed_by: str | Unset = UNSET,
    held: bool | Unset = UNSET,
    limit: int | Unset = UNSET,
    cursor: str | Unset = UNSET,

) -> ErrorBody | JobPage | None:
    """ `GET /v1/jobs` — jobs by id, without payloads, a page at a time.
    `next_cursor` is null on the last page. Paging by id stays correct while
    rows change: no job is shown twice or skipped.

    Args:
        topic (str | Unset):
        status (str | Unset):
        key (str | Unset):
        run_at_from (str | Unset):
        run_at_to (str | Unset):
        unconsumed_by (str | Unset):
        held (bool | Unset):
        limit (int | Unset):
        cursor (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ErrorBody | JobPage
     """


    return (await asyncio_detailed(
        client=client,
topic=topic,
status=status,
key=key,
run_at_from=run_at_from,
run_at_to=run_at_to,
unconsumed_by=unconsumed_by,
held=held,
limit=limit,
cursor=cursor,

    )).parsed
